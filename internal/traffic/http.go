package traffic

import (
	"io"
	"net/http"
)

// CountHTTP counts the bytes of request and response bodies of h as
// traffic, for surfaces that move data over plain HTTP (file transfers,
// streamed RPCs) rather than over the websocket. Headers are not counted,
// like websocket framing is not. Response bytes are counted as they are
// handed to the connection, before the write: a client that has them
// finds them counted (a write that fails counts bytes it did not send,
// which only keeps the sandbox awake a moment longer).
func CountHTTP(c *Counter, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &countedBody{ReadCloser: r.Body, c: c}
		}
		h.ServeHTTP(&countedWriter{ResponseWriter: w, c: c}, r)
	})
}

type countedBody struct {
	io.ReadCloser
	c *Counter
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.In(n)
	return n, err
}

// countedWriter counts what is written; Unwrap lets http.ResponseController
// (flushes, deadlines) and websocket upgrades reach the real writer.
type countedWriter struct {
	http.ResponseWriter
	c *Counter
}

func (w *countedWriter) Write(p []byte) (int, error) {
	w.c.Out(len(p))
	return w.ResponseWriter.Write(p)
}

// countChunk is how much of a ReadFrom is counted at once: a long
// download keeps counting as it goes, so it keeps the sandbox awake.
const countChunk = 4 << 20

// ReadFrom lets io.Copy (and http.ServeContent) reach the real writer's
// ReadFrom, which sends a file with sendfile(2), in counted chunks.
func (w *countedWriter) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{w}, r)
	}
	// A limited file stays one LimitedReader around the file, which is
	// what sendfile recognizes.
	src, limit := r, int64(-1)
	if lr, ok := r.(*io.LimitedReader); ok {
		src, limit = lr.R, lr.N
	}
	var total int64
	for limit != 0 {
		want := int64(countChunk)
		if limit > 0 {
			want = min(want, limit)
		}
		if limit > 0 {
			w.c.Out(int(want)) // known: count it before sendfile sends it
		}
		n, err := rf.ReadFrom(&io.LimitedReader{R: src, N: want})
		total += n
		if limit < 0 {
			w.c.Out(int(n))
		}
		if limit > 0 {
			limit -= n
			r.(*io.LimitedReader).N = limit
		}
		if err != nil || n < want {
			return total, err
		}
	}
	return total, nil
}

// writerOnly hides ReadFrom, so io.Copy does not call it again.
type writerOnly struct{ io.Writer }

func (w *countedWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

func (w *countedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
