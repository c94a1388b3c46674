package traffic

import (
	"io"
	"net/http"
)

// CountHTTP counts the bytes of request and response bodies of h as
// traffic, for surfaces that move data over plain HTTP (file transfers,
// streamed RPCs) rather than over the websocket. Headers are not counted,
// like websocket framing is not.
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
	n, err := w.ResponseWriter.Write(p)
	w.c.Out(n)
	return n, err
}

func (w *countedWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

func (w *countedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
