package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/wire"
)

// subprotocol is the websocket subprotocol of protocol version 1.
const subprotocol = "rayito.v1"

// Sizes of what the agent sends: data frames are small, but an event can
// carry a kernel output of up to 32 MiB (a large image).
const (
	maxIncoming = 33 << 20
	// keepText is the control frame buffer kept between frames; a larger
	// one (from a rare huge event) is let go.
	keepText = 64 << 10
)

// conn is one websocket connection. Its reader goroutine is the only
// reader; writes may come from any goroutine (the library serializes them).
type conn struct {
	c     *Client
	ws    *websocket.Conn
	batch *batchConn // nil: writes are not gathered
	gen   uint64
	inst  string // the agent run that answered
	// inputOffsets: the agent numbers input (IN frames with offsets).
	inputOffsets bool
	// opIDs: the agent takes op_ids (exactly-once requests).
	opIDs bool
	// suspending: its hello said the sandbox is being paused.
	suspending bool
	done       chan struct{}            // closed when the reader ended
	hdr        [wire.MaxDataHeader]byte // reader goroutine: head of a data frame
	text       []byte                   // reader goroutine: one control frame
}

// head is what every control frame is first decoded into.
type head struct {
	ID     *uint64         `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
	Event  string          `json:"event"`
	Stream uint64          `json:"stream"`
	Seq    uint64          `json:"seq"`
}

type helloMsg struct {
	Protocol   int    `json:"protocol"`
	Version    string `json:"version"`
	Generation uint64 `json:"generation"`
	Instance   string `json:"instance"`
	// InputOffsets: the agent takes IN frames with offsets.
	InputOffsets bool `json:"input_offsets"`
	// OpIDs: the agent takes op_ids.
	OpIDs bool `json:"op_ids"`
	// Suspending: the sandbox is being paused (the host's /v1/pause).
	Suspending bool `json:"suspending"`
}

type gapMsg struct {
	Channel string `json:"channel"`
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
}

// dial opens a connection and reads the agent's hello.
func (c *Client) dial(ctx context.Context) (*conn, error) {
	hdr := http.Header{}
	if token := c.accessToken(); token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	hc, batch := batchingClient(c.opts.HTTPClient)
	ws, resp, err := websocket.Dial(ctx, c.wsURL, &websocket.DialOptions{
		HTTPClient: hc, HTTPHeader: hdr, Subprotocols: []string{subprotocol},
	})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("%w: %s", ErrUnauthorized, c.wsURL)
		}
		return nil, fmt.Errorf("client: dial %s: %w", c.wsURL, err)
	}
	if ws.Subprotocol() != subprotocol {
		ws.CloseNow()
		return nil, fmt.Errorf("client: %s does not speak %s", c.wsURL, subprotocol)
	}
	ws.SetReadLimit(maxIncoming)
	typ, msg, err := ws.Read(ctx)
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("client: reading hello: %w", err)
	}
	var h struct {
		Event string `json:"event"`
		helloMsg
	}
	if typ != websocket.MessageText || json.Unmarshal(msg, &h) != nil || h.Event != "hello" {
		ws.CloseNow()
		return nil, protocolErrorf("first frame is not a hello: %.100q", msg)
	}
	if h.Protocol != 1 {
		ws.CloseNow()
		return nil, fmt.Errorf("client: agent speaks protocol %d, this client 1", h.Protocol)
	}
	return &conn{c: c, ws: ws, batch: batch(), gen: h.Generation, inst: h.Instance, inputOffsets: h.InputOffsets, opIDs: h.OpIDs, suspending: h.Suspending, done: make(chan struct{})}, nil
}

// install makes cn the current connection and starts its reader; false
// if the client was closed meanwhile (cn is then closed).
func (c *Client) install(cn *conn) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cn.ws.CloseNow()
		return false
	}
	c.cur, c.gen, c.instance = cn, cn.gen, cn.inst
	c.changedLocked()
	suspended := c.noteSuspendingLocked(cn.suspending, cn.gen)
	c.wg.Add(1)
	if c.opts.PingInterval > 0 {
		c.wg.Add(1)
		go c.heartbeat(cn)
	}
	c.mu.Unlock()
	suspended()
	go c.readLoop(cn)
	return true
}

// heartbeat pings cn until its reader ends. Without it a route that died
// silently (no reset, as a stalled proxy or NAT does) would hold every
// handle and call forever; dropping cn makes the client reconnect.
func (c *Client) heartbeat(cn *conn) {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-cn.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.PingInterval)
		err := cn.ws.Ping(ctx) // the reader takes the pong
		cancel()
		if err != nil {
			c.log.Debug("ping unanswered: dropping the connection", zap.Error(err))
			cn.ws.CloseNow()
			return
		}
	}
}

func (cn *conn) write(typ websocket.MessageType, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), cn.c.opts.WriteTimeout)
	defer cancel()
	if cn.batch == nil {
		return cn.ws.Write(ctx, typ, msg)
	}
	cn.batch.begin()
	err := cn.ws.Write(ctx, typ, msg)
	if ferr := cn.batch.end(cn.c.opts.WriteTimeout); err == nil {
		err = ferr
	}
	return err
}

func (cn *conn) writeText(msg []byte) error { return cn.write(websocket.MessageText, msg) }

func (cn *conn) close() { cn.ws.Close(websocket.StatusNormalClosure, "") }

// readLoop reads frames until the connection ends. Its reads have no
// context on purpose: cancelling one makes the library drop the connection.
func (c *Client) readLoop(cn *conn) {
	defer c.wg.Done()
	var err error
	for err == nil {
		var typ websocket.MessageType
		var r io.Reader
		if typ, r, err = cn.ws.Reader(context.Background()); err != nil {
			break
		}
		if typ == websocket.MessageBinary {
			err = c.readData(cn, r)
		} else {
			err = c.readControl(cn, r)
		}
	}
	cn.ws.CloseNow()
	close(cn.done)
	c.connLost(cn, err)
}

// readData routes one data frame into its handle's channel, reading the
// payload straight into the channel's buffer.
func (c *Client) readData(cn *conn, r io.Reader) error {
	n, err := readFull(r, cn.hdr[:])
	if err != nil {
		return err
	}
	d, err := wire.DecodeData(cn.hdr[:n])
	if err == nil && d.Type != wire.Out {
		err = errors.New("IN frame from the agent")
	}
	if err != nil {
		c.reportError(protocolErrorf("bad data frame: %v", err))
		return drain(r)
	}
	h := c.handle(d.Stream)
	if h == nil {
		return drain(r) // a stream given up on (abandoned exec, failed handle)
	}
	b := h.byteChannel(d.Channel)
	if b == nil {
		h.violation(protocolErrorf("stream %d (%s) has no channel %d", d.Stream, h.kind, d.Channel))
		return drain(r)
	}
	if err := b.receive(d.Offset, d.Payload, r); err != nil {
		if !errors.Is(err, ErrProtocol) {
			return err
		}
		h.violation(err)
		return drain(r)
	}
	return nil
}

// readControl handles one control frame: a response or an event.
func (c *Client) readControl(cn *conn, r io.Reader) error {
	buf := bytes.NewBuffer(cn.text[:0])
	if _, err := buf.ReadFrom(r); err != nil {
		return err
	}
	msg := buf.Bytes()
	if cap(msg) <= keepText {
		cn.text = msg
	} else {
		cn.text = nil
	}
	var m head
	if err := json.Unmarshal(msg, &m); err != nil {
		c.reportError(protocolErrorf("malformed control frame: %v", err))
		return nil
	}
	if m.ID != nil {
		c.complete(*m.ID, m.Result, m.Error)
		return nil
	}
	var h *handle
	if m.Stream != 0 {
		h = c.handle(m.Stream)
	}
	switch {
	case m.Event == "suspending" || m.Event == "resumed":
		var ev struct {
			Generation uint64 `json:"generation"`
		}
		json.Unmarshal(msg, &ev)
		c.mu.Lock()
		after := c.noteSuspendingLocked(m.Event == "suspending", ev.Generation)
		c.mu.Unlock()
		after()
	case m.Event == "error":
		e := m.Error
		if e == nil {
			e = &Error{Code: CodeInternal, Message: "error event without error"}
		}
		e.Stream = m.Stream
		if h != nil {
			h.onError(e)
		} else {
			c.reportError(e)
		}
	case h == nil:
		// hello again, or an event of a stream this client let go of.
	case m.Event == "end":
		var e End
		if err := json.Unmarshal(msg, &e); err != nil {
			h.violation(protocolErrorf("malformed end: %v", err))
			return nil
		}
		h.onEnd(cn, &e)
	case m.Event == "input":
		if h.input != nil {
			h.input.progress(msg)
		}
	case m.Event == "gap":
		var g gapMsg
		if err := json.Unmarshal(msg, &g); err != nil {
			h.violation(protocolErrorf("malformed gap: %v", err))
			return nil
		}
		h.onGap(g)
	case m.Seq != 0:
		h.onEvent(m.Seq, bytes.Clone(msg))
	default:
		c.log.Debug("unknown event", zap.String("event", m.Event), zap.Uint64("stream", m.Stream))
	}
	return nil
}

// connLost runs when cn's reader ended: pending calls on it fail, and the
// supervisor reconnects unless that is off or the client is closed.
func (c *Client) connLost(cn *conn, cause error) {
	c.mu.Lock()
	if c.cur == cn {
		c.cur = nil
		c.changedLocked()
	}
	var ps []*pending
	for id, p := range c.pending {
		if p.conn == cn {
			delete(c.pending, id)
			ps = append(ps, p)
		}
	}
	closed, final := c.closed, c.failed != nil || c.opts.DisableReconnect
	c.mu.Unlock()
	c.log.Debug("connection lost", zap.Int("close_code", int(websocket.CloseStatus(cause))), zap.Error(cause))
	err := fmt.Errorf("%w: %w", ErrConnectionLost, cause)
	if closed {
		err = ErrClosed // Close cut it: a retry would be pointless
	}
	for _, p := range ps {
		p.fail(err)
	}
	switch {
	case closed:
	case final:
		c.failEverything(err)
	default:
		select {
		case c.lost <- struct{}{}:
		default:
		}
	}
}

// readFull reads until p is full or the message ends.
func readFull(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := r.Read(p[n:])
		n += k
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// drain reads the rest of a message the client does not want; the
// library needs every message read to its end.
func drain(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}
