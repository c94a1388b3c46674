package jupyterapi

import (
	"time"

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

// parkFor is how long a relay waits for its session's next websocket.
const parkFor = 60 * time.Second

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
