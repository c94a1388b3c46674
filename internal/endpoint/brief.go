package endpoint

import "time"

// Brief ops (a file's metadata, opening a transfer) are answered in
// microseconds but may block: a filesystem call on a hung network mount
// does not return. Handing each one to a goroutine of its own, as slow ops
// are, costs about 30 µs a request on the project's VM (the new goroutine
// wakes a thread on the other vCPU), a third of a stat's round trip. So
// the reader runs a brief op itself, and if the op is still running after
// briefLimit it passes the reading of the connection to a new goroutine
// and ends once the op is answered. One goroutine reads at any time, and
// a blocked op holds up the connection's other frames for at most
// briefLimit; ops that usually take longer stay slow.
const briefLimit = time.Millisecond

// runBrief runs a brief op on the reader and says whether the reading
// passed to another goroutine meanwhile (the caller then stops reading).
func (ss *Session) runBrief(c *call, o op) (handedOff bool) {
	ss.briefSeq++
	seq := ss.briefSeq
	ss.briefRunning.Store(seq)
	t := time.AfterFunc(briefLimit, func() {
		// A timer of an earlier op that fired late finds another number
		// (or none) and does nothing.
		if ss.briefRunning.CompareAndSwap(seq, 0) {
			ss.read()
		}
	})
	ss.respond(c, o)
	if ss.briefRunning.CompareAndSwap(seq, 0) {
		t.Stop()
		return false
	}
	return true
}

// read reads the connection until it ends, then ends the session; or
// until the reading passes to another goroutine, which will.
func (ss *Session) read() {
	if ss.readLoop() {
		ss.finish()
	}
}
