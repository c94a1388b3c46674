package files

import (
	"errors"
	"io"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// Kinds of the streams transfers run on.
const (
	KindRead  stream.Kind = "file_read"
	KindWrite stream.Kind = "file_write"
)

// readChunk is how much a download reads at a time: the agent's largest
// data frame, so one read becomes one frame.
const readChunk = 256 << 10

// Transfer is a stream a transfer runs on.
type Transfer struct {
	Stream *stream.Stream
	Path   string // absolute
	// Size is what a read stream will carry, -1 for a file read to its
	// end (a virtual file); for a write, 0.
	Size int64
}

// ReadOptions say what part of a file ReadStream sends.
type ReadOptions struct {
	Offset int64 // the first byte
	Length int64 // how many bytes at most; 0: up to the end
	// Buffer is the retention of the data channel, 0 for the stream
	// default (4 MiB).
	Buffer int
	// Grace is how long the transfer waits for a client that went away
	// before it gives up; 0 is stream.DefaultGrace, negative none.
	Grace time.Duration
	// Client is the address the request came from (surface.ClientOf):
	// the open file counts against its share (held.go).
	Client string
}

// ReadStream streams a file's content, read as the user, on a new stream
// of kind file_read with one byte channel, "data" (policy block: the file
// is read as fast as the client takes it). The stream ends with reason
// done and the byte count as "size", or with an error: ErrChanged if the
// file shrank below what was promised, ErrAbandoned once no client has
// been attached for the grace.
func (m *Manager) ReadStream(userName, path string, o ReadOptions) (Transfer, error) {
	if m.reg == nil {
		return Transfer{}, newErr("read", path, ErrUnsupported, nil)
	}
	if o.Offset < 0 || o.Length < 0 || o.Buffer < 0 || o.Buffer > stream.MaxByteCapacity {
		return Transfer{}, newErr("read", path, ErrInvalid, errReadRange)
	}
	f, err := m.Open(o.Client, userName, path)
	if err != nil {
		return Transfer{}, err
	}
	size := int64(-1)
	if f.Sized {
		if o.Offset > f.Info.Size {
			f.Close()
			return Transfer{}, newErr("read", f.Info.Path, ErrInvalid, errOffset(f.Info.Size))
		}
		size = f.Info.Size - o.Offset
		if o.Length > 0 {
			size = min(size, o.Length)
		}
	} else if o.Length > 0 {
		size = o.Length
	}
	st := m.reg.Create(stream.Config{
		Kind:     KindRead,
		Channels: []stream.ChannelSpec{{Name: "data", Unit: stream.Bytes, Policy: stream.Block, Capacity: o.Buffer}},
		Grace:    o.Grace,
	})
	if err := m.track(st); err != nil {
		f.Close()
		return Transfer{}, err
	}
	go m.send(st, f, o.Offset, size, f.Sized)
	return Transfer{Stream: st, Path: f.Info.Path, Size: size}, nil
}

// send copies the file into the stream's log. want < 0 reads to the end;
// exact says the file must have that many bytes.
func (m *Manager) send(st *stream.Stream, f *File, off, want int64, exact bool) {
	defer m.untrack(st)
	defer f.Close()
	log := st.Log("data")
	buf := make([]byte, readChunk)
	var sent int64
	for want < 0 || sent < want {
		n := int64(len(buf))
		if want >= 0 {
			n = min(n, want-sent)
		}
		k, err := f.ReadAt(buf[:n], off+sent)
		if k > 0 {
			if _, werr := log.Write(buf[:k]); werr != nil {
				return // the stream was ended: the manager is closing
			}
			sent += int64(k)
			// A block log only drops data once its grace ran out with
			// no client: nobody is coming back for the rest.
			if log.Stats().Lost > 0 {
				m.finish(st, newErr("read", f.Info.Path, ErrAbandoned, errNoClient))
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF) && exact && sent < want:
			m.finish(st, newErr("read", f.Info.Path, ErrChanged, errShrank(want, sent)))
			return
		case errors.Is(err, io.EOF):
			want = sent
		case err != nil:
			m.finish(st, newErr("read", f.Info.Path, nil, err))
			return
		}
	}
	st.Finish(stream.End{Reason: stream.ReasonDone, Status: "ok", Extra: map[string]any{"size": sent}})
}

// finish ends a transfer's stream with err.
func (m *Manager) finish(st *stream.Stream, err error) {
	st.Finish(stream.End{Reason: stream.ReasonError, Message: err.Error(), Extra: map[string]any{"code": string(Code(err))}})
}

// track registers a running transfer, so that Close ends it.
func (m *Manager) track(st *stream.Stream) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		m.finish(st, ErrClosed)
		return newErr("transfer", "", ErrClosed, nil)
	}
	m.transfers[st] = struct{}{}
	m.wg.Add(1)
	return nil
}

func (m *Manager) untrack(st *stream.Stream) {
	m.mu.Lock()
	delete(m.transfers, st)
	m.mu.Unlock()
	m.wg.Done()
}

// endTransfers ends every running transfer for Close.
func (m *Manager) endTransfers() {
	m.mu.Lock()
	sts := make([]*stream.Stream, 0, len(m.transfers))
	for st := range m.transfers {
		sts = append(sts, st)
	}
	m.mu.Unlock()
	for _, st := range sts {
		m.finish(st, newErr("transfer", "", ErrClosed, nil))
	}
}
