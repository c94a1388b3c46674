package stream

// Renew makes the registry a new sandbox's, for a snapshot resumed as
// another sandbox than the one it was taken of: a new instance id (a
// client holding handles from before is told that the agent changed, as
// after a restart), every ended stream expires at once, attached or not,
// and running streams let go of everything they retained so far (an
// attach from cursor 0 gets a gap up to the present). Running streams
// keep their ids and go on: they are part of the template. Nothing the
// template's build printed can be read from the new sandbox.
func (r *Registry) Renew() (old, current string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old = r.instance.ID
	inst := NewInstance()
	for r.ownsLocked(inst.prefix << idBits) {
		inst = NewInstance()
	}
	r.instance = inst
	r.lastIDs[len(r.lastIDs)-1] = r.nextID
	r.prefixes, r.lastIDs = append(r.prefixes, inst.prefix), append(r.lastIDs, 0)
	r.nextID = inst.prefix << idBits
	for len(r.ended) > 0 {
		r.expireLocked(r.ended[0])
	}
	for _, s := range r.streams {
		s.mu.Lock()
		for _, l := range s.logs {
			l.discard(int(l.end - l.start))
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
	return old, inst.ID
}
