package files

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// UploadWindow is how many bytes of an upload may be in flight: received
// by the agent (or on their way) but not yet written to the file. A
// client that keeps what it sent minus the last reported "written" within
// it is never refused. 4 MiB keeps a loopback or LAN link busy while the
// disk catches up, and bounds the agent's memory per upload.
const UploadWindow = 4 << 20

// progressEvery is how much writing makes an upload report progress
// before its input runs dry: an eighth of the window, so a client at full
// speed always has most of its window open.
const progressEvery = UploadWindow / 8

// uploadCheck is how often an upload checks whether its client is gone.
const uploadCheck = time.Second

// UploadOptions say how WriteStream writes.
type UploadOptions struct {
	WriteOptions
	// Grace is how long the upload waits for a client that went away
	// before it gives up; 0 is stream.DefaultGrace, negative none.
	Grace time.Duration
}

// WriteStream starts an upload: a Writer fed by a stream of kind
// file_write, whose Control (an *Upload) takes the input. Its one channel,
// "events", carries progress events; it ends with reason done and the
// file's "size", "sha256", "path" and "created" once the input is closed
// and the file committed, or with an error (the temporary file is then
// removed). owner is the connection allowed to send input (see
// Upload.TakeOver).
func (m *Manager) WriteStream(userName, path string, o UploadOptions, owner any) (Transfer, error) {
	if m.reg == nil {
		return Transfer{}, newErr("write", path, ErrUnsupported, nil)
	}
	w, err := m.Create(userName, path, o.WriteOptions)
	if err != nil {
		return Transfer{}, err
	}
	up := &Upload{m: m, w: w, owner: owner, buf: ring{max: UploadWindow}, wake: make(chan struct{}, 1), closeAt: -1}
	up.st = m.reg.Create(stream.Config{
		Kind:     KindWrite,
		Channels: []stream.ChannelSpec{{Name: "events", Unit: stream.Events, Policy: stream.Drop, Capacity: 256}},
		Grace:    o.Grace,
		Control:  up,
	})
	if err := m.track(up.st); err != nil {
		w.Abort()
		return Transfer{}, err
	}
	go up.run()
	return Transfer{Stream: up.st, Path: w.Path()}, nil
}

// Upload takes an upload's input. Its methods never block: input is
// queued (within UploadWindow) and written by the upload's goroutine,
// which also owns the Writer.
type Upload struct {
	m    *Manager
	st   *stream.Stream
	w    *Writer
	wake chan struct{}

	mu       sync.Mutex
	buf      ring
	owner    any
	received int64
	written  int64
	closing  bool
	closeAt  int64 // an end of input waiting for received to get there; -1 none
	failed   error // set once: the upload ends with it
	ended    bool  // committed or failed: no more input
}

// WriteInputFrom queues input that the connection from sent. Input from
// a connection that is not the owner is ErrNotOwner; input beyond the
// window is ErrWindow, and fails the upload, since the file would miss
// those bytes.
func (u *Upload) WriteInputFrom(from any, p []byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case from != u.owner:
		return newErr("write", u.w.Path(), ErrNotOwner, nil)
	case u.failed != nil:
		return u.failed
	case u.closing || u.ended:
		return newErr("write", u.w.Path(), ErrInputClosed, nil)
	case len(p) > u.buf.free():
		u.failed = newErr("write", u.w.Path(), ErrWindow, errWindow)
		u.signal()
		return u.failed
	}
	if u.closeAt >= 0 && u.received+int64(len(p)) > u.closeAt {
		p = p[:u.closeAt-u.received] // past the declared end: not the file's
	}
	u.buf.write(p)
	u.received += int64(len(p))
	if u.closeAt >= 0 && u.received == u.closeAt {
		u.closing = true
	}
	u.signal()
	return nil
}

// WriteInputAt is WriteInputFrom for input that starts at offset off of
// the upload (IN frames with offsets): what the upload received already
// is dropped, and a frame past it (input lost on the way) is refused
// with nothing written. The owner check stays: input from a connection
// the upload was taken from is refused as before.
func (u *Upload) WriteInputAt(from any, off uint64, p []byte) error {
	u.mu.Lock()
	received := uint64(u.received)
	u.mu.Unlock()
	switch {
	case off > received:
		return newErr("write", u.w.Path(), ErrInvalid, fmt.Errorf("%w: a frame at offset %d, but only %d bytes were received: nothing written", stream.ErrInputGap, off, received))
	case off+uint64(len(p)) <= received:
		return nil
	}
	// Only WriteInput* add to received, and frames of one connection are
	// handled one at a time: received is still what it was above.
	return u.WriteInputFrom(from, p[received-off:])
}

// CloseInput commits the file once the queued input is written; the
// stream's end says how that went.
func (u *Upload) CloseInput() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.failed != nil:
		return u.failed
	case u.closing || u.ended:
		return newErr("write", u.w.Path(), ErrInputClosed, nil)
	}
	u.closing = true
	u.signal()
	return nil
}

// CloseInputAt commits the file once off bytes of input were received
// and written: an end of input that overtook the input before it (sent
// on a new connection after a cut, while the rest is sent again) waits
// for it. Again at the same offset it is a no-op; below what was
// received it is a conflict.
func (u *Upload) CloseInputAt(off uint64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.failed != nil:
		return u.failed
	case off < uint64(u.received):
		return newErr("write", u.w.Path(), ErrInputEOF, fmt.Errorf("end of input at %d, but %d bytes were received", off, u.received))
	case (u.closing || u.closeAt >= 0) && u.closeAt == int64(off):
		return nil
	case u.closing || u.ended || u.closeAt >= 0:
		return newErr("write", u.w.Path(), ErrInputClosed, nil)
	}
	u.closeAt = int64(off)
	if u.received == u.closeAt {
		u.closing = true
		u.signal()
	}
	return nil
}

// TakeOver makes from the connection whose input counts, and returns how
// many input bytes the upload has received and written: a client that
// reattaches (after a resume cut its connection) resends from received.
// From then on, input still in flight on the old connection is refused,
// so nothing is written twice.
func (u *Upload) TakeOver(from any) (received, written int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.owner = from
	return u.received, u.written
}

// Abandon gives the upload up when the owner asks (it detached): the
// temporary file goes at once rather than when the grace runs out. Input
// already closed is committed anyway.
func (u *Upload) Abandon(from any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if from == u.owner && u.failed == nil && !u.closing && !u.ended {
		u.failed = newErr("write", u.w.Path(), ErrAbandoned, errDetached)
		u.signal()
	}
}

func (u *Upload) signal() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// run writes the queued input until the input is closed (commit) or the
// upload fails, is abandoned, or the manager closes (abort).
func (u *Upload) run() {
	defer u.m.untrack(u.st)
	events := u.st.Log("events")
	var reported int64
	check := time.NewTimer(uploadCheck)
	defer check.Stop()
	for {
		u.mu.Lock()
		seg, failed, closing := u.buf.peek(), u.failed, u.closing
		u.mu.Unlock()
		switch {
		case failed != nil:
			u.end(failed)
			return
		case len(seg) > 0:
			if _, err := u.w.Write(seg); err != nil {
				u.end(err)
				return
			}
			u.mu.Lock()
			u.buf.consume(len(seg))
			u.written += int64(len(seg))
			written, empty := u.written, u.buf.size == 0
			u.mu.Unlock()
			if written-reported >= progressEvery || empty {
				reported = written
				events.Append(progressEvent(written))
			}
			continue
		case closing:
			u.commit()
			return
		}
		select {
		case <-u.wake:
		case <-u.st.Done(): // ended from outside: the manager is closing
			u.end(newErr("write", u.w.Path(), ErrClosed, nil))
			return
		case <-check.C:
			if err := u.abandoned(); err != nil {
				u.end(err)
				return
			}
			check.Reset(uploadCheck)
		}
	}
}

// abandoned says whether the client has been gone for the grace.
func (u *Upload) abandoned() error {
	alone, since := u.st.Unattached()
	if alone && time.Since(since) >= u.st.Grace() {
		return newErr("write", u.w.Path(), ErrAbandoned, errNoClient)
	}
	return nil
}

func (u *Upload) commit() {
	c, err := u.w.Commit()
	if err != nil {
		u.end(err)
		return
	}
	u.mu.Lock()
	u.ended = true
	u.mu.Unlock()
	u.st.Finish(stream.End{Reason: stream.ReasonDone, Status: "ok", Extra: map[string]any{
		"size": c.Size, "sha256": c.SHA256, "path": c.Path, "created": c.Created,
	}})
}

// end fails the upload: the temporary file goes, the stream ends.
func (u *Upload) end(err error) {
	u.w.Abort()
	u.mu.Lock()
	u.ended = true
	if u.failed == nil {
		u.failed = err
	}
	u.mu.Unlock()
	u.m.finish(u.st, err)
}

// progressEvent is a progress event's body: {"written":W} (the native
// protocol sends it as {"event":"progress","stream","seq","written"}).
func progressEvent(written int64) func(seq uint64) []byte {
	b := strconv.AppendInt([]byte(`{"written":`), written, 10)
	b = append(b, '}')
	return func(uint64) []byte { return b }
}
