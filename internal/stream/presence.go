package stream

import "time"

// Unattached reports whether no client is attached to the stream and, if
// so, since when. A producer that only exists for its client (a file
// transfer) gives up once the client has been gone for the stream's grace.
func (s *Stream) Unattached() (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attached == 0, s.lastDetach
}

// Grace is how long Block logs keep waiting for a client that went away;
// 0 means none.
func (s *Stream) Grace() time.Duration {
	if s.grace < 0 {
		return 0
	}
	return s.grace
}
