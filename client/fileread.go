package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rayito/rayito-agent/internal/wire"
)

// ReadOptions pick part of a file (Files.OpenRange).
type ReadOptions struct {
	Offset int64 // the first byte
	Length int64 // bytes at most; 0: up to the end
}

// FileReader is a file being downloaded over the websocket: an
// io.ReadCloser (and io.WriterTo) that survives reconnects and resumes,
// since the download is a stream the client reattaches from its cursor.
//
// Concurrency: read from one goroutine at a time; Close from anywhere.
type FileReader struct {
	h    *handle
	b    *byteChan
	path string
	size int64
}

// Open starts downloading the file at path.
func (f *Files) Open(ctx context.Context, path string) (*FileReader, error) {
	return f.OpenRange(ctx, path, ReadOptions{})
}

// OpenRange starts downloading part of the file at path.
func (f *Files) OpenRange(ctx context.Context, path string, o ReadOptions) (*FileReader, error) {
	p := struct {
		fileParams
		Offset int64 `json:"offset,omitempty"`
		Length int64 `json:"length,omitempty"`
	}{f.params(path), o.Offset, o.Length}
	h, r, err := f.c.create(ctx, "file_read", p, KindFileRead, outputs{})
	if err != nil {
		return nil, err
	}
	size := int64(-1)
	if r.Size != nil {
		size = *r.Size
	}
	return &FileReader{h: h, b: h.bytes[wire.ChanData], path: r.Path, size: size}, nil
}

// Path is the absolute path of the file.
func (r *FileReader) Path() string { return r.path }

// Size is how many bytes the download carries, -1 when unknown (a file of
// /proc, read to its end).
func (r *FileReader) Size() int64 { return r.size }

// Read reads the file's content. After the last byte it returns io.EOF,
// or the error that ended the download (the file shrank while read, the
// agent shut down) as an *Error.
func (r *FileReader) Read(p []byte) (int, error) {
	n, err := r.b.Read(p)
	return n, r.endError(err)
}

// WriteTo writes the rest of the content to w, without an extra copy.
func (r *FileReader) WriteTo(w io.Writer) (int64, error) {
	n, err := r.b.WriteTo(w)
	if err == nil {
		err = r.endError(io.EOF)
		if err == io.EOF {
			err = nil
		}
	}
	return n, err
}

// endError turns the channel's end into the download's outcome.
func (r *FileReader) endError(err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	end, ferr := r.h.wait(context.Background())
	switch {
	case ferr != nil:
		return ferr
	case end.Reason == ReasonDone:
		return io.EOF
	}
	return transferError(r.h.id, end)
}

// Close stops the download if it has not ended; the agent drops it once
// its grace passes.
func (r *FileReader) Close() error {
	if !r.h.finished.Load() {
		r.h.abandon(fmt.Errorf("client: file_read %s: %w", r.path, io.ErrClosedPipe))
	}
	return nil
}

// transferError is the error a file transfer ended with.
func transferError(id uint64, end *End) error {
	code := end.Code
	if code == "" {
		code = CodeInternal
	}
	msg := end.Message
	if msg == "" {
		msg = fmt.Sprintf("stream %d ended with reason %q", id, end.Reason)
	}
	return &Error{Code: code, Message: msg, Stream: id}
}
