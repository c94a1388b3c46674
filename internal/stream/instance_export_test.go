package stream

// UseUpPrefix makes the registry's next id the last one of its current
// prefix, so a test reaches the end of 2^32 ids without making them.
func UseUpPrefix(r *Registry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID = r.nextID&^(1<<idBits-1) | (1<<idBits - 2)
}
