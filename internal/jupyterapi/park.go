package jupyterapi

import (
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
)

// Parked relays. A kernel websocket's relay owns the requests its client
// made (replies and outputs come back through it). When the websocket
// closes (a resume's cut, a dropped network) the client reconnects with
// the same session_id; its requests in flight, such as a cell waiting in
// input(), must still get their replies. So the relay of a websocket that
// named a session is parked instead of closed: it keeps collecting what
// the kernel sends for its requests, and the next websocket of that
// session takes it over and sends what the last one had not written.
// jupyter_server buffers a session's messages the same way.
//
// A client may reconnect before the agent saw its old websocket close (a
// network that dropped silently, or the new one simply won the race with
// the old one's teardown): the new websocket then closes the old one and
// waits until it has parked, as jupyter_server replaces a stale
// connection of the same session, so the session's requests in flight
// follow the client instead of waiting in a parked relay nobody takes.

const (
	// parkFor is how long a relay waits for its session's next websocket.
	parkFor = 60 * time.Second
	// staleWait bounds the wait for a replaced websocket to park: its
	// teardown is a few channel operations, unless its writer is blocked
	// in a write to a dead peer (CloseNow ends that too).
	staleWait = 5 * time.Second
)

type parked struct {
	st    *stream.Stream
	rel   relay
	from  map[string]uint64 // what the last websocket had written
	timer *time.Timer
}

func parkKey(kernel, session string) string { return kernel + "\x00" + session }

// park keeps a closed websocket's relay for its session's next one.
func (s *Server) park(kernel, session string, st *stream.Stream, rel relay, from map[string]uint64) bool {
	if session == "" || st.Ended() != nil {
		return false
	}
	key := parkKey(kernel, session)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.parked[key] != nil {
		return false
	}
	p := &parked{st: st, rel: rel, from: from}
	p.timer = time.AfterFunc(parkFor, func() {
		s.mu.Lock()
		if s.parked[key] == p {
			delete(s.parked, key)
			s.mu.Unlock()
			rel.Close()
			return
		}
		s.mu.Unlock()
	})
	s.parked[key] = p
	return true
}

// replaceStale closes the session's open websocket, if it has one, and
// waits until its relay is parked for the caller.
func (s *Server) replaceStale(kernel, session string) {
	if session == "" {
		return
	}
	s.mu.Lock()
	old := s.open[parkKey(kernel, session)]
	s.mu.Unlock()
	if old == nil {
		return
	}
	old.log.Info("a new websocket of the session replaces this one", zap.String("session", session))
	old.ws.CloseNow()
	select {
	case <-old.done:
	case <-time.After(staleWait):
		old.log.Warn("the replaced websocket did not end in time; its relay is not taken over")
	}
}

// parkedOf counts the kernel's parked relays.
func (s *Server) parkedOf(kernel string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for key := range s.parked {
		if strings.HasPrefix(key, kernel+"\x00") {
			n++
		}
	}
	return n
}

// unpark takes the session's parked relay, if there is a live one.
func (s *Server) unpark(kernel, session string) *parked {
	if session == "" {
		return nil
	}
	key := parkKey(kernel, session)
	s.mu.Lock()
	p := s.parked[key]
	delete(s.parked, key)
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	p.timer.Stop()
	if p.st.Ended() != nil {
		p.rel.Close()
		return nil
	}
	return p
}

// closeParked closes every parked relay: the agent is stopping.
func (s *Server) closeParked() {
	s.mu.Lock()
	ps := s.parked
	s.parked = map[string]*parked{}
	s.mu.Unlock()
	for _, p := range ps {
		p.timer.Stop()
		p.rel.Close()
	}
}

// relayCursor is where a new websocket on st starts: after what the last
// one wrote, or the start.
func relayCursor(p *parked) map[string]uint64 {
	if p == nil || p.from == nil {
		return nil
	}
	return map[string]uint64{jupyter.EventsChannel: p.from[jupyter.EventsChannel]}
}
