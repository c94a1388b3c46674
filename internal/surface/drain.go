package surface

import (
	"io"
	"net/http"
	"time"
)

// What an early answer reads of the body it did not take.
const (
	drainBytes = 256 << 20
	drainTime  = 30 * time.Second
)

// DrainBody reads and discards what is left of r's body, up to
// drainBytes and within drainTime, for a handler that answers an upload
// early (a full disk, a bad part). A client that sends its whole body
// before it reads its answer (most do) would otherwise meet a closed
// connection with its bytes unread: the agent's kernel resets it, and the
// reset destroys the answer in the client's buffers. Beyond the bound the
// connection is closed after the answer, as before. Call it only once the
// handler has read from the body: a client that sent Expect:
// 100-continue and got no 100 has sent nothing to drain.
func DrainBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(drainTime))
	n, _ := io.CopyN(io.Discard, r.Body, drainBytes)
	if n == drainBytes {
		w.Header().Set("Connection", "close")
	}
	rc.SetReadDeadline(time.Time{})
}
