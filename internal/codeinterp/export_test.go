package codeinterp

import "time"

// SetKeepalive shortens the keepalive interval for a test.
func SetKeepalive(d time.Duration) (restore func()) {
	old := keepaliveEvery
	keepaliveEvery = d
	return func() { keepaliveEvery = old }
}
