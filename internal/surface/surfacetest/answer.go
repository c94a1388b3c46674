// Package surfacetest holds what tests of the agent's HTTP surfaces,
// in several packages, check on a raw connection. Only tests import it.
package surfacetest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// AnsweredAndClosed reads the answer to the request sent on c, which must
// come at once, and then expects the agent to close c. It returns the
// answer's status.
func AnsweredAndClosed(c net.Conn) (int, error) {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("no answer at once: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		return resp.StatusCode, fmt.Errorf("after the answer read %d, %v; want the agent to close", n, err)
	}
	return resp.StatusCode, nil
}
