package stream

// AttachedCount reports how many attachments hold the stream open, so
// tests can check that failed attaches and double closes leave it exact.
func AttachedCount(s *Stream) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attached
}

// SetEventMaxBytes lowers an event log's memory bound so tests can reach it
// without allocating DefaultEventBytes.
func SetEventMaxBytes(l *Log, n int) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.maxBytes = n
}
