package codeinterp

import "time"

// SetKeepalive shortens the keepalive interval for a test.
func SetKeepalive(d time.Duration) (restore func()) {
	old := keepaliveEvery
	keepaliveEvery = d
	return func() { keepaliveEvery = old }
}

// GoneSettle is how long a cell whose client went away waits before it
// is cancelled.
const GoneSettle = goneSettle
