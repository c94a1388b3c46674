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

// Armed reports whether a's consumer is parked with its hook armed: the
// next append calls the hook.
func Armed(a *Attachment) bool {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return a.ho.armed
}

// Reclaims reports how many times writers short of room reclaimed; the
// count changes only once such a reclaim is over.
func Reclaims(r *Registry) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reclaims
}
