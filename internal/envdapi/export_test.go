package envdapi

// InFlight is how many requests the API is serving: a test sees with it
// that a handler has returned.
func (s *Server) InFlight() int {
	s.calls.mu.Lock()
	defer s.calls.mu.Unlock()
	return len(s.calls.set)
}
