package stream

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
)

// Stream ids carry the agent instance that made them, so that an id from
// before a restart can never name a stream of the new process: the new
// process would otherwise count from 1 again and hand a client that
// reconnects someone else's output. An id is prefix<<idBits | n, below
// 2^53 so that JavaScript clients read it exactly as a number.
const (
	idBits     = 32
	prefixBits = 53 - idBits
	// MaxID is the largest stream id the agent hands out.
	MaxID = 1<<53 - 1
)

// Instance identifies one run of the agent process: made at start, kept
// across snapshot resumes (memory is restored), new on every restart.
type Instance struct {
	// ID is random; clients compare it to notice a restart.
	ID string
	// prefix is the high bits of this instance's stream ids.
	prefix uint64
}

// NewInstance draws a new instance id and stream id prefix.
func NewInstance() Instance {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux 3.17+; an agent that cannot
		// tell its runs apart must not run.
		panic("stream: no randomness for the instance id: " + err.Error())
	}
	return Instance{ID: hex.EncodeToString(b[:16]), prefix: randomPrefix(binary.LittleEndian.Uint64(b[16:]))}
}

// randomPrefix maps random bits to a prefix, never 0: ids below 2^32
// would look like those of agents before ids carried their instance.
func randomPrefix(r uint64) uint64 {
	return 1 + r%(1<<prefixBits-1)
}

// owns reports whether id was made with prefix p.
func owns(p, id uint64) bool { return id>>idBits == p }

// Possible reports whether any run of the agent could have made id: a
// prefix from 1 to 2^21-1 and a number from 1, below 2^53.
func Possible(id uint64) bool {
	return id <= MaxID && id>>idBits != 0 && id&(1<<idBits-1) != 0
}

// Instance is the agent run this registry belongs to.
// A snapshot resumed as another sandbox changes it (Renew).
func (r *Registry) Instance() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.instance.ID
}

// Owns reports whether id is one this registry may have made. An id it
// does not own comes from another run of the agent: the agent restarted
// since, and that stream and its output are gone.
func (r *Registry) Owns(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ownsLocked(id)
}

func (r *Registry) ownsLocked(id uint64) bool {
	for _, p := range r.prefixes {
		if owns(p, id) {
			return true
		}
	}
	return false
}

// nextIDLocked is the id after the last one handed out. After 2^32 ids
// under one prefix it goes on under a new one.
func (r *Registry) nextIDLocked() uint64 {
	id := r.nextID + 1
	if id&(1<<idBits-1) != 0 {
		return id
	}
	p := NewInstance().prefix
	for r.ownsLocked(p << idBits) {
		p = NewInstance().prefix
	}
	r.lastIDs[len(r.lastIDs)-1] = r.nextID
	r.prefixes, r.lastIDs = append(r.prefixes, p), append(r.lastIDs, 0)
	return p<<idBits + 1
}
