package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"sync"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/wire"
)

// uploadChunk is the payload of one upload frame: a sixteenth of the
// agent's 4 MiB window, so many are in flight while progress comes back.
const uploadChunk = 256 << 10

// chunkBufs recycles upload chunks: each is kept until the agent reports
// it written, for a resend after a reconnect.
var chunkBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, uploadChunk)
	return &b
}}

// WriteOptions say how Files.Create writes. The zero value replaces the
// file (keeping its mode) or creates it with 0o666 less the agent's umask,
// creating missing parent directories.
type WriteOptions struct {
	// Mode, if not 0, is the file's mode, applied exactly.
	Mode fs.FileMode
	// NoParents fails (CodeNotFound) when the parent directory is missing.
	NoParents bool
	// Append starts from the file's current content.
	Append bool
	// Exclusive fails (CodeConflict) when the file exists.
	Exclusive bool
	// Verify hashes what is written and makes Close check it against
	// the agent's SHA-256 of the file (not with Append). The agent
	// always hashes; checking costs the client about as much CPU as
	// sending the data. Without it Close checks the size.
	Verify bool
}

// FileWriter is a file being uploaded over the websocket, committed
// atomically by Close: until then readers of the path see the old file,
// and an upload that fails or is aborted leaves it as it was. It keeps at
// most the agent's window in flight and what was sent but not yet written
// by the agent; after a reconnect (a resume) it resends what the agent
// did not receive, so an upload survives a pause.
//
// Concurrency: Write, ReadFrom and Close from one goroutine at a time;
// Abort from anywhere.
type FileWriter struct {
	f      *Files
	h      *handle
	path   string
	window int64
	verify bool      // not appending: the agent's size must be ours
	hash   hash.Hash // of what the caller wrote, for Verify; nil without
	end    *End      // after Close: what the agent committed

	wmu   sync.Mutex // serializes Write, ReadFrom, Close
	frame []byte

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on progress, reattach, end
	cn       *conn         // the connection the upload is attached on
	written  int64         // what the agent reported written
	sent     int64         // what was handed to a connection
	resend   int64         // after a reattach: the agent has up to here; -1 none
	retained []retainedChunk
	closed   bool
}

// retainedChunk is sent input the agent has not reported written yet.
type retainedChunk struct {
	off int64
	buf *[]byte
}

// Create starts writing the file at path; Close commits it. See
// WriteOptions.
func (f *Files) Create(ctx context.Context, path string, o WriteOptions) (*FileWriter, error) {
	p := struct {
		fileParams
		Mode      *uint32 `json:"mode,omitempty"`
		Parents   bool    `json:"parents"`
		Append    bool    `json:"append,omitempty"`
		Exclusive bool    `json:"exclusive,omitempty"`
	}{fileParams: f.params(path), Parents: !o.NoParents, Append: o.Append, Exclusive: o.Exclusive}
	if o.Mode != 0 {
		m := modeBits(o.Mode)
		p.Mode = &m
	}
	w := &FileWriter{f: f, verify: !o.Append, changed: make(chan struct{}), resend: -1}
	if o.Verify && !o.Append {
		w.hash = sha256.New()
	}
	_, r, err := f.c.createWith(ctx, "file_write", p, KindFileWrite, outputs{}, func(h *handle, r created) {
		w.h, w.cn, w.path, w.window = h, h.conn, r.Path, int64(r.Window)
		h.onAttach = w.reattached
	})
	if err != nil {
		return nil, err
	}
	if r.Window <= 0 {
		w.h.abandon(protocolErrorf("file_write result without a window"))
		return nil, protocolErrorf("file_write result without a window")
	}
	go w.followProgress()
	return w, nil
}

// Path is the absolute path of the file.
func (w *FileWriter) Path() string { return w.path }

func (w *FileWriter) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// followProgress applies the agent's progress events until the upload
// ends: they open the window and free what the agent has written.
func (w *FileWriter) followProgress() {
	for {
		raw, err := w.h.events.next(w.f.c.life)
		var gap *GapError
		switch {
		case errors.As(err, &gap):
			continue // an older report: a later one follows
		case err != nil:
			w.mu.Lock()
			w.notifyLocked()
			w.mu.Unlock()
			return
		}
		var ev struct {
			Event   string `json:"event"`
			Written int64  `json:"written"`
		}
		if json.Unmarshal(raw, &ev) != nil || ev.Event != "progress" {
			continue
		}
		w.mu.Lock()
		w.written = max(w.written, ev.Written)
		w.notifyLocked()
		w.mu.Unlock()
	}
}

// releaseLocked frees the retained chunks the agent has written. Only the
// writing goroutine calls it: it also takes chunks from the pool.
func (w *FileWriter) releaseLocked() {
	n := 0
	for _, c := range w.retained {
		if c.off+int64(len(*c.buf)) > w.written {
			break
		}
		chunkBufs.Put(c.buf)
		n++
	}
	w.retained = w.retained[n:]
}

// reattached runs on the reader goroutine when a reconnect attached the
// upload again: the agent says how much input it received.
func (w *FileWriter) reattached(res json.RawMessage) {
	var r struct {
		Received *int64 `json:"received"`
		Written  int64  `json:"written"`
	}
	json.Unmarshal(res, &r)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cn = w.h.attachedConn()
	if r.Received != nil {
		w.resend = *r.Received
	}
	w.written = max(w.written, r.Written)
	w.notifyLocked()
}

// ready waits until the upload is attached on the live connection with
// room for n more bytes, resending first what a reconnect lost. It
// returns the connection to send on.
func (w *FileWriter) ready(n int) (*conn, error) {
	for {
		if err := w.failed(); err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.releaseLocked()
		cn, ch := w.cn, w.changed
		live := cn != nil && cn == w.f.c.current()
		if live && w.resend >= 0 {
			type frame struct {
				off int64
				p   []byte
			}
			var frames []frame
			for _, c := range w.retained {
				if end := c.off + int64(len(*c.buf)); end > w.resend {
					from := max(w.resend-c.off, 0)
					frames = append(frames, frame{c.off + from, (*c.buf)[from:]})
				}
			}
			w.resend = -1
			w.mu.Unlock()
			for _, f := range frames {
				if !w.send(cn, f.off, f.p) {
					break
				}
			}
			continue
		}
		if live && w.sent-w.written+int64(n) <= w.window {
			w.mu.Unlock()
			return cn, nil
		}
		w.mu.Unlock()
		select {
		case <-ch:
		case <-w.h.done:
		}
	}
}

// send writes one IN frame on cn, numbered where the agent takes that (so
// that input lost on the way is refused, not appended after a hole);
// false if cn dropped (a reattach will tell what to resend).
func (w *FileWriter) send(cn *conn, off int64, p []byte) bool {
	d := wire.Data{Type: wire.In, Stream: w.h.id, Channel: wire.ChanInput, Payload: p}
	if cn.inputOffsets {
		d.Type, d.Offset = wire.InAt, uint64(off)
	}
	w.frame = wire.AppendData(w.frame[:0], d)
	if err := cn.write(websocket.MessageBinary, w.frame); err != nil {
		w.mu.Lock()
		if w.cn == cn {
			w.cn = nil
		}
		w.mu.Unlock()
		return false
	}
	return true
}

// failed is the error that ends the upload early, if it ended.
func (w *FileWriter) failed() error {
	if !w.h.finished.Load() {
		if err := w.h.inputError(); err != nil {
			return fmt.Errorf("client: file_write %s: %w", w.path, err)
		}
		return nil
	}
	end, err := w.h.wait(context.Background())
	if err != nil {
		return err
	}
	if end.Reason == ReasonDone {
		return fmt.Errorf("client: file_write %s: %w", w.path, io.ErrClosedPipe)
	}
	return transferError(w.h.id, end)
}

// Write sends b; it blocks while the window is full and while the client
// reconnects.
func (w *FileWriter) Write(b []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	done := 0
	for done < len(b) {
		n := min(len(b)-done, uploadChunk)
		buf := chunkBufs.Get().(*[]byte)
		*buf = append((*buf)[:0], b[done:done+n]...)
		if err := w.push(buf); err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// ReadFrom uploads everything r yields, reading straight into the
// chunks it sends, one chunk ahead: reading the next chunk overlaps with
// sending this one. It returns once r is no longer read.
func (w *FileWriter) ReadFrom(r io.Reader) (int64, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	type chunk struct {
		buf *[]byte
		err error
	}
	chunks := make(chan chunk, 1)
	stop := make(chan struct{})
	go func() {
		defer close(chunks)
		for {
			buf := chunkBufs.Get().(*[]byte)
			n, err := io.ReadFull(r, (*buf)[:uploadChunk])
			*buf = (*buf)[:n]
			select {
			case chunks <- chunk{buf, err}:
			case <-stop:
				chunkBufs.Put(buf)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		close(stop)
		for c := range chunks {
			chunkBufs.Put(c.buf)
		}
	}()
	var total int64
	for c := range chunks {
		if len(*c.buf) == 0 {
			chunkBufs.Put(c.buf)
		} else {
			n := len(*c.buf)
			if err := w.push(c.buf); err != nil {
				return total, err
			}
			total += int64(n)
		}
		switch {
		case c.err == io.EOF || c.err == io.ErrUnexpectedEOF:
			return total, nil
		case c.err != nil:
			return total, c.err
		}
	}
	return total, nil
}

// push sends one chunk and keeps it until the agent has written it.
func (w *FileWriter) push(buf *[]byte) error {
	if w.closed {
		chunkBufs.Put(buf)
		return fmt.Errorf("client: file_write %s: %w", w.path, io.ErrClosedPipe)
	}
	cn, err := w.ready(len(*buf))
	if err != nil {
		chunkBufs.Put(buf)
		return err
	}
	w.mu.Lock()
	off := w.sent
	w.retained = append(w.retained, retainedChunk{off: off, buf: buf})
	w.sent += int64(len(*buf))
	w.mu.Unlock()
	if w.hash == nil {
		w.send(cn, off, *buf)
		return nil
	}
	// The hash runs on another core while the frame goes out.
	hashed := make(chan struct{})
	go func() {
		w.hash.Write(*buf)
		close(hashed)
	}()
	w.send(cn, off, *buf)
	<-hashed
	return nil
}

// Close commits the file: once everything written has arrived, the agent
// renames it into place. It returns an error if the agent's size or
// SHA-256 of the file differ from what was written (not for Append).
func (w *FileWriter) Close() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	defer w.releaseAll()
	// A close_stdin that arrived just before a reconnect may have ended
	// the upload by the time the client is attached again: the end then
	// says how the commit went.
	for !w.h.finished.Load() {
		cn, err := w.ready(0)
		if err != nil {
			if w.h.finished.Load() {
				break
			}
			return err
		}
		// Where the agent numbers input, the end of input names the
		// file's length: a close_stdin that overtakes input being sent
		// again after a cut waits for it instead of committing less.
		var params any = streamRef{Stream: w.h.id}
		if cn.inputOffsets {
			off := uint64(w.sent)
			params = closeStdinParams{Stream: w.h.id, Offset: &off}
		}
		_, err = w.f.c.call(w.f.c.life, "close_stdin", params, callOpts{on: cn})
		if err == nil || HasCode(err, CodeConflict) {
			break // a conflict: an earlier close_stdin arrived before a reconnect
		}
		if !errors.Is(err, ErrConnectionLost) {
			return fmt.Errorf("client: file_write %s: %w", w.path, err)
		}
	}
	// The end of input may wait for input that a cut lost after it was
	// sent: a reattach from now on still asks for it again, and only
	// ready sends it.
	for !w.h.finished.Load() {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if _, err := w.ready(0); err != nil && !w.h.finished.Load() {
			return err
		}
		select {
		case <-ch:
		case <-w.h.done:
		case <-w.f.c.life.Done():
		}
	}
	end, err := w.h.wait(w.f.c.life)
	if err != nil {
		return err
	}
	if end.Reason != ReasonDone {
		return transferError(w.h.id, end)
	}
	w.end = end
	if w.verify && (end.Size == nil || *end.Size != w.sent) {
		size := "no size"
		if end.Size != nil {
			size = fmt.Sprint(*end.Size, " bytes")
		}
		return fmt.Errorf("%w: file_write %s: the agent wrote %s, the client sent %d", ErrProtocol, w.path, size, w.sent)
	}
	if w.hash != nil {
		if sum := hex.EncodeToString(w.hash.Sum(nil)); end.SHA256 != sum {
			return fmt.Errorf("%w: file_write %s: the agent's SHA-256 is %s, the client's %s", ErrProtocol, w.path, end.SHA256, sum)
		}
	}
	return nil
}

// Committed is what the agent reports of the file after a successful
// Close: its path, size, SHA-256 (hex) and whether it was created.
func (w *FileWriter) Committed() (path string, size int64, sha256 string, created bool) {
	if w.end == nil || w.end.Size == nil {
		return "", 0, "", false
	}
	return w.end.Path, *w.end.Size, w.end.SHA256, w.end.Created
}

// Abort gives the upload up: the agent removes its temporary file and
// the path keeps its old content. It does nothing after Close.
func (w *FileWriter) Abort(ctx context.Context) error {
	err := w.h.detach(ctx)
	w.mu.Lock()
	w.notifyLocked()
	w.mu.Unlock()
	return err
}

// attachedConn is the connection the stream is attached on, nil if none.
func (h *handle) attachedConn() *conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn
}

func (w *FileWriter) releaseAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.retained {
		chunkBufs.Put(c.buf)
	}
	w.retained = nil
}
