package jupyterapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
)

const (
	// maxFrame bounds a message from a client, as the manager bounds the
	// kernel's (widgets send buffers).
	maxFrame = 32 << 20
	// closeResumed asks clients to reconnect after a resume: "service
	// restart", which @jupyterlab/services answers by reconnecting (it
	// gives up on 1000 and 1001).
	closeResumed websocket.StatusCode = 1012
)

// relay is the Control of a kernel's relay stream.
type relay interface {
	SendMsg(ctx context.Context, m jupyter.Msg) error
	Close() error
}

// channelConn is one kernel websocket: the reader sends the client's
// messages to the kernel through the relay; the writer pumps the relay's
// stream (the kernel's iopub and the replies to this relay's requests)
// to the client.
type channelConn struct {
	s      *Server
	ws     *websocket.Conn
	relay  relay
	att    *stream.Attachment
	kernel string
	v1     bool
	log    *zap.Logger
	// session is the client's session_id, st the relay's stream: the
	// relay is parked for the session's next websocket (park.go).
	session string
	st      *stream.Stream
	written atomic.Uint64 // the relay's cursor after the last message written to the client
	// untrack leaves the resume cut's registry.
	untrack func()
	// done is closed once the relay is parked or closed: a newer
	// websocket of the session may take it over (park.go).
	done chan struct{}
}

// serveChannels upgrades to the kernel websocket. The client offers the
// v1 subprotocol; selecting none makes it reconnect with the legacy
// framing.
func (s *Server) serveChannels(w http.ResponseWriter, r *http.Request) {
	k, ok := s.kernel(w, r)
	if !ok {
		return
	}
	if s.o.Cuts.Closing() {
		writeError(w, http.StatusServiceUnavailable, "the agent is shutting down")
		return
	}
	session := r.URL.Query().Get("session_id")
	s.replaceStale(k.ID(), session)
	var st *stream.Stream
	p := s.unpark(k.ID(), session)
	if p != nil {
		st = p.st
	} else {
		var err error
		if st, err = s.o.Kernels.Channels(k.ID()); err != nil {
			writeErr(w, err)
			return
		}
	}
	rel, ok := st.Control.(relay)
	att, err := st.Attach(relayCursor(p), 0)
	if !ok || err != nil {
		if ok {
			rel.Close()
		}
		writeError(w, http.StatusInternalServerError, "cannot relay kernel "+k.ID())
		return
	}
	var protocols []string
	if !s.o.LegacyOnly {
		protocols = []string{v1Protocol}
	}
	ws, err := websocket.Accept(w, r, s.o.Origins.AcceptOptions(websocket.AcceptOptions{
		Subprotocols:    protocols,
		CompressionMode: websocket.CompressionDisabled,
	}))
	if err != nil {
		att.Close()
		rel.Close()
		return
	}
	ws.SetReadLimit(maxFrame)
	c := &channelConn{
		s: s, ws: ws, relay: rel, att: att, kernel: k.ID(), v1: ws.Subprotocol() == v1Protocol, session: session, st: st,
		log:  s.log.With(zap.String("kernel", k.ID()), zap.Uint64("relay", st.ID)),
		done: make(chan struct{}),
	}
	if !s.track(c) {
		ws.Close(websocket.StatusGoingAway, "the agent is shutting down")
		att.Close()
		rel.Close()
		return
	}
	defer s.untrack(c)
	c.run()
}

// track registers c with the registry of long-lived connections (for
// resumes and the shutdown) and as its session's open websocket; false
// once the agent is shutting down.
func (s *Server) track(c *channelConn) bool {
	_, untrack, err := s.o.Cuts.Track(c)
	if err != nil {
		return false
	}
	c.untrack = untrack
	if c.session != "" {
		s.mu.Lock()
		s.open[parkKey(c.kernel, c.session)] = c
		s.mu.Unlock()
	}
	if s.o.Traffic != nil {
		s.o.Traffic.ConnOpened()
	}
	return true
}

func (s *Server) untrack(c *channelConn) {
	c.untrack()
	s.mu.Lock()
	if key := parkKey(c.kernel, c.session); s.open[key] == c {
		delete(s.open, key)
	}
	s.mu.Unlock()
	if s.o.Traffic != nil {
		s.o.Traffic.ConnClosed()
	}
}

func (c *channelConn) run() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		c.write(ctx)
	}()
	c.read(ctx)
	cancel()
	wg.Wait()
	c.att.Close()
	if !c.s.park(c.kernel, c.session, c.st, c.relay, map[string]uint64{jupyter.EventsChannel: c.written.Load()}) {
		c.relay.Close()
	}
	close(c.done)
	c.ws.CloseNow()
}

// read passes the client's messages to the kernel until the websocket
// closes. A message that cannot be decoded or sent is dropped and logged,
// as jupyter_server does: the protocol has no way to refuse one.
func (c *channelConn) read(ctx context.Context) {
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		c.count(len(data), true)
		var m jupyter.Msg
		if c.v1 {
			m, err = jupyter.DecodeMsg(data)
		} else {
			m, err = decodeLegacy(data, typ == websocket.MessageBinary)
		}
		if err == nil {
			// During a restart it waits for the new process (the
			// manager's), and the messages behind it wait in order.
			err = c.relay.SendMsg(ctx, m)
		}
		if err != nil {
			c.log.Warn("dropped a client message", zap.Error(err))
		}
	}
}

// write sends the relay's messages to the client. The relay's stream ends
// when the kernel is shut down: the websocket then closes normally.
func (c *channelConn) write(ctx context.Context) {
	for {
		it, err := c.att.Next(ctx, nil, maxFrame)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				c.log.Warn("relay read failed", zap.Error(err))
			}
			return
		}
		switch it.Kind {
		case stream.ItemGap:
			c.log.Warn("kernel messages dropped before this client read them", zap.Uint64("from", it.From), zap.Uint64("to", it.To))
		case stream.ItemEnd:
			c.ws.Close(websocket.StatusNormalClosure, "kernel "+c.kernel+" was shut down")
			return
		case stream.ItemEvent:
			if err := c.send(ctx, it.Data); err != nil {
				return
			}
			// Written to the connection: the relay need not keep it for
			// this client. Unacknowledged, a relay kept every message up
			// to its limits, and a kernel's large outputs then crowded
			// cells out of the retention budget.
			c.att.Ack(map[string]uint64{it.Channel: it.Offset})
			c.written.Store(it.Offset)
		}
	}
}

// send writes one of the relay's messages: in the v1 framing as the
// relay's stream holds it, or re-encoded in the legacy one.
func (c *channelConn) send(ctx context.Context, ev []byte) error {
	typ, frame := websocket.MessageBinary, ev
	if !c.v1 {
		m, err := jupyter.DecodeMsg(ev)
		if err != nil {
			c.log.Warn("undecodable relay message", zap.Error(err))
			return nil
		}
		var binaryFrame bool
		if frame, binaryFrame, err = encodeLegacy(m); err != nil {
			c.log.Warn("unencodable kernel message", zap.Error(err))
			return nil
		}
		if !binaryFrame {
			typ = websocket.MessageText
		}
	}
	if err := c.ws.Write(ctx, typ, frame); err != nil {
		return err
	}
	c.count(len(frame), false)
	return nil
}

func (c *channelConn) count(n int, in bool) {
	switch t := c.s.o.Traffic; {
	case t == nil:
	case in:
		t.In(n)
	default:
		t.Out(n)
	}
}

// Cut is the resume cut (surface.Cuttable): it closes the websocket with
// 1012, so that the client reconnects over the new network path; the
// kernel and its relay's kernel-side state are untouched.
func (c *channelConn) Cut(ctx context.Context, gen uint64) {
	closeBounded(ctx, c.ws, closeResumed, "the sandbox was resumed; reconnect")
}

// Leave closes the websocket with 1001 (going away): the agent is
// stopping (surface.Cuts.Shutdown).
func (c *channelConn) Leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, closeWait)
	defer cancel()
	closeBounded(ctx, c.ws, websocket.StatusGoingAway, "the agent is shutting down")
}

// stop lets go of the parked relays, and parks no more: the agent is
// stopping (the registry closes the websockets themselves).
func (s *Server) stop(context.Context) {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.closeParked()
}

// closeBounded closes ws with code, within ctx: Close waits for the
// client's close frame, and a client left half-dead by a resume never
// sends one.
func closeBounded(ctx context.Context, ws *websocket.Conn, code websocket.StatusCode, why string) {
	stop := context.AfterFunc(ctx, func() { ws.CloseNow() })
	defer stop()
	ws.Close(code, why)
}
