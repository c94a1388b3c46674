package client

import (
	"bytes"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// lazyAckDelay is how long an ack that no window needs yet may wait: long
// enough to fold the acks of a burst of frames into one, short enough
// that a stream held by a small retention buffer barely notices.
const lazyAckDelay = 2 * time.Millisecond

// sender writes the frames nobody waits for: acks, at most one queued per
// handle, and fire-and-forget requests. Consumers and the reader goroutine
// never block on the network this way.
type sender struct {
	c    *Client
	wake chan struct{}

	mu     sync.Mutex
	acks   []*handle
	lazy   []lazyAck
	frames [][]byte
}

type lazyAck struct {
	h  *handle
	at time.Time
}

func newSender(c *Client) *sender {
	return &sender{c: c, wake: make(chan struct{}, 1)}
}

// ack queues an ack of h's consumed cursors, now or after lazyAckDelay.
// The handle's ackQueued and lazyQueued flags dedup.
func (s *sender) ack(h *handle, lazy bool) {
	s.mu.Lock()
	if lazy {
		s.lazy = append(s.lazy, lazyAck{h, time.Now().Add(lazyAckDelay)})
	} else {
		s.acks = append(s.acks, h)
	}
	s.mu.Unlock()
	s.signal()
}

// control queues a request whose answer nobody waits for (its id has no
// pending call, so the response is dropped).
func (s *sender) control(op string, stream uint64) {
	b := []byte(`{"stream":`)
	b = strconv.AppendUint(b, stream, 10)
	b = append(b, '}')
	msg := request(s.c.nextID.Add(1), op, b, requestName{})
	s.mu.Lock()
	s.frames = append(s.frames, msg)
	s.mu.Unlock()
	s.signal()
}

func (s *sender) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run sends until the client closes. Frames queued while there is no
// connection are dropped: a reattach resets what acks would have said.
func (s *sender) run() {
	defer s.c.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var buf []byte
	var acks []*handle
	var lazy []lazyAck
	var frames [][]byte
	for {
		select {
		case <-s.c.stop:
			timer.Stop()
			return
		case <-s.wake:
		case <-timer.C:
		}
		s.mu.Lock()
		acks, s.acks = s.acks, acks[:0]
		lazy = append(lazy, s.lazy...)
		s.lazy = s.lazy[:0]
		frames, s.frames = s.frames, nil
		s.mu.Unlock()
		cn := s.c.current()
		for _, h := range acks {
			// Clear first: a consumer that reads on meanwhile queues again.
			h.ackQueued.Store(false)
			buf, cn = s.sendAck(cn, h, buf)
		}
		clear(acks)
		now := time.Now()
		due := 0
		for ; due < len(lazy) && !lazy[due].at.After(now); due++ {
			lazy[due].h.lazyQueued.Store(false)
			buf, cn = s.sendAck(cn, lazy[due].h, buf)
		}
		lazy = lazy[:copy(lazy, lazy[due:])]
		if len(lazy) > 0 {
			timer.Reset(time.Until(lazy[0].at))
		}
		for _, f := range frames {
			if cn != nil && cn.write(websocket.MessageText, f) != nil {
				cn = nil
			}
		}
	}
}

// sendAck writes h's ack unless it would repeat the last one; it returns
// nil for the connection once a write failed.
func (s *sender) sendAck(cn *conn, h *handle, buf []byte) ([]byte, *conn) {
	if cn == nil || !h.acking() {
		return buf, cn
	}
	buf = h.appendAck(buf[:0])
	if bytes.Equal(buf, h.lastAck) {
		return buf, cn
	}
	if cn.write(websocket.MessageText, buf) != nil {
		return buf, nil
	}
	h.lastAck = append(h.lastAck[:0], buf...)
	return buf, cn
}
