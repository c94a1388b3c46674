package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/wire"
)

// Defaults of Options.
const (
	// DefaultReconnectTimeout is how long the client keeps trying to get a
	// connection back: a VM resume plus a proxy's reconnect fit well within.
	DefaultReconnectTimeout = 60 * time.Second
	// DefaultWriteTimeout bounds one websocket write; a connection that
	// cannot take a frame for that long is treated as dropped.
	DefaultWriteTimeout = 30 * time.Second
)

// Options configure a Client. The zero value works.
type Options struct {
	// Token is the agent's access token, sent as a bearer header.
	Token string
	// Logger receives debug logs of reconnects and dropped frames.
	Logger *zap.Logger
	// HTTPClient makes the websocket handshake and the HTTP calls
	// (Health, Traffic); nil uses http.DefaultClient.
	HTTPClient *http.Client
	// Dialer, if set, opens every connection to the agent (transport.go);
	// the URL's host then only names the agent in requests. vsock:// and
	// hvsock:// URLs bring their own.
	Dialer Dialer
	// DisableReconnect makes a dropped connection final: every handle and
	// call fails with ErrConnectionLost.
	DisableReconnect bool
	// ReconnectTimeout bounds reconnecting; DefaultReconnectTimeout if 0.
	ReconnectTimeout time.Duration
	// WriteTimeout bounds one frame write; DefaultWriteTimeout if 0.
	WriteTimeout time.Duration
	// PingInterval, when positive, has a websocket ping check the
	// connection that often; one unanswered for that long drops it and the
	// client reconnects, so a route that died without a reset (a stalled
	// proxy, a NAT timeout) is noticed. Off by default: a paused sandbox
	// answers no ping, and with pings a pause longer than the interval
	// plus ReconnectTimeout ends the client's handles, where without them
	// the connection waits for the resume. Pings are not traffic: they
	// never keep an idle sandbox awake.
	PingInterval time.Duration
	// OnError receives error events the agent does not tie to a stream or
	// request (such as a frame it could not parse). It runs on the
	// connection's reader goroutine: keep it short.
	OnError func(error)
	// OnReconnect runs after a new connection is up and every live handle
	// has been reattached, with the agent's resume generation.
	OnReconnect func(generation uint64)
	// OnSuspend runs when the agent says its sandbox is about to be
	// paused, with the generation being paused. Until the sandbox runs
	// again, reads and calls wait for it however long it takes (only
	// their context or Close ends them), and reconnecting spends none of
	// ReconnectTimeout. It runs on the connection's reader goroutine:
	// keep it short.
	OnSuspend func(generation uint64)
}

// Client is a connection to one agent, re-established on its own when it
// drops. All methods are safe for concurrent use.
type Client struct {
	httpBase  string // http(s)://host:port
	wsURL     string
	opts      Options
	log       *zap.Logger
	nextID    atomic.Uint64
	send      *sender
	token     atomic.Pointer[string] // Options.Token, replaced by Init
	defKernel atomic.Pointer[string] // the default kernel's id, once an execute named it

	// opPrefix and opSeq make op_ids (opid.go); noOpIDs (tests) sends
	// none, as a client before them did.
	opPrefix string
	opSeq    atomic.Uint64
	noOpIDs  bool

	life   context.Context // cancelled by Close: stops dials
	cancel context.CancelFunc
	lost   chan struct{} // the connection dropped: reconnect
	stop   chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu      sync.Mutex
	cur     *conn         // nil while reconnecting
	changed chan struct{} // closed and replaced when cur or failed changes
	gen     uint64
	pending map[uint64]*pending
	handles map[uint64]*handle
	failed  error // set for good: ErrClosed, or reconnecting gave up
	closed  bool

	instance string // the agent run of the current (or last) connection
	// suspended: the agent said its sandbox is being paused, and no
	// connection since said it runs (suspend.go); guarded by mu.
	suspended bool
}

// pending is a request waiting for its response.
type pending struct {
	conn *conn
	done chan struct{}
	res  json.RawMessage
	err  error
	// onResult runs on the reader goroutine before the next frame is
	// read, so a handle exists before its stream's first data frame.
	// abandoned says the caller stopped waiting.
	onResult  func(cn *conn, res json.RawMessage, abandoned bool) error
	abandoned bool // guarded by Client.mu
}

// Dial connects to the agent at url (ws://host:port, or wss, http, https;
// the path /v1/connect is added) and reads its hello.
func Dial(ctx context.Context, rawURL string, opts Options) (*Client, error) {
	httpBase, wsURL, dial, err := endpointURLs(rawURL)
	if err != nil {
		return nil, err
	}
	if opts.Dialer != nil {
		dial = opts.Dialer
	}
	opts.HTTPClient = withDialer(opts.HTTPClient, dial)
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.ReconnectTimeout <= 0 {
		opts.ReconnectTimeout = DefaultReconnectTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	c := &Client{
		httpBase: httpBase, wsURL: wsURL, opts: opts, log: opts.Logger,
		lost: make(chan struct{}, 1), stop: make(chan struct{}), changed: make(chan struct{}),
		pending: make(map[uint64]*pending), handles: make(map[uint64]*handle),
		opPrefix: newOpPrefix(),
	}
	c.token.Store(&opts.Token)
	c.life, c.cancel = context.WithCancel(context.Background())
	c.send = newSender(c)
	cn, err := c.dial(ctx)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.install(cn)
	c.wg.Add(2)
	go c.send.run()
	go c.supervise()
	return c, nil
}

// endpointURLs derives the websocket URL and the HTTP base from the URL a
// user gives, and the dialer its scheme needs (nil: TCP).
func endpointURLs(raw string) (httpBase, wsURL string, dial Dialer, err error) {
	if rest, ok := strings.CutPrefix(raw, "vsock://"); ok {
		d, host, err := parseVsock(strings.TrimSuffix(strings.TrimSuffix(rest, "/"), "/v1/connect"))
		if err != nil {
			return "", "", nil, fmt.Errorf("client: url %q: %w", raw, err)
		}
		return "http://" + host, "ws://" + host + "/v1/connect", d, nil
	}
	if rest, ok := strings.CutPrefix(raw, "hvsock://"); ok {
		d, host, err := parseHybridVsock(rest)
		if err != nil {
			return "", "", nil, fmt.Errorf("client: url %q: %w", raw, err)
		}
		return "http://" + host, "ws://" + host + "/v1/connect", d, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", nil, fmt.Errorf("client: bad url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "ws", "http":
		u.Scheme = "http"
	case "wss", "https":
		u.Scheme = "https"
	default:
		return "", "", nil, fmt.Errorf("client: url %q: scheme must be ws, wss, http, https, vsock or hvsock", raw)
	}
	if u.Host == "" {
		return "", "", nil, fmt.Errorf("client: url %q has no host", raw)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1/connect")
	u.RawQuery, u.Fragment = "", ""
	httpBase = u.String()
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	return httpBase, u.String() + "/v1/connect", nil, nil
}

// Generation is the agent's resume generation, from the hello of the
// current (or last) connection.
func (c *Client) Generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Instance is the id of the agent run that answered the current (or last)
// connection. It changes when the agent restarts (its streams are then
// gone), not when its VM resumes.
func (c *Client) Instance() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.instance
}

// Close ends the connection and fails every handle and pending call with
// ErrClosed. Streams on the agent keep running. Callbacks set for output
// stop after their current call returns.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed, c.failed = true, ErrClosed
	cn := c.cur
	c.changedLocked()
	c.mu.Unlock()
	c.cancel()
	close(c.stop)
	if cn != nil {
		cn.close()
	}
	c.wg.Wait()
	c.failEverything(ErrClosed)
	return nil
}

// changedLocked wakes everyone waiting for a connection.
func (c *Client) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// connection returns the current connection, waiting while reconnecting.
func (c *Client) connection(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		cn, ch, failed := c.cur, c.changed, c.failed
		c.mu.Unlock()
		if failed != nil {
			return nil, failed
		}
		if cn != nil {
			return cn, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// dropped closes cn after a failed write and waits until its reader has
// noticed, so that a retry does not spin on the dead connection.
func (c *Client) dropped(ctx context.Context, cn *conn) error {
	cn.ws.CloseNow()
	for {
		c.mu.Lock()
		cur, ch := c.cur, c.changed
		c.mu.Unlock()
		if cur != cn {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// current returns the connection if there is one, without waiting.
func (c *Client) current() *conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// callOpts say how a call behaves when things go wrong.
type callOpts struct {
	onResult func(cn *conn, res json.RawMessage, abandoned bool) error
	// on pins the call to one connection: if it is not current, or drops,
	// the call fails with ErrConnectionLost instead of waiting for another.
	on *conn
	// retry re-sends the request on the next connection if the first one
	// dropped before the answer: only for ops that are safe to repeat.
	retry bool
	// once names the request with an op_id (opid.go) where the agent
	// takes them, and then re-sends it as retry does: the agent runs it
	// at most once.
	once bool
}

// call sends a request and waits for its response.
func (c *Client) call(ctx context.Context, op string, params any, o callOpts) (json.RawMessage, error) {
	body, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", op, err)
	}
	var name requestName // set on the first send to an agent that takes op_ids
	for {
		cn := o.on
		if cn == nil {
			if cn, err = c.connection(ctx); err != nil {
				return nil, err
			}
		}
		if o.once && name.opID == "" && cn.opIDs && !c.noOpIDs {
			name = requestName{opID: c.newOpID(), instance: cn.inst}
		}
		resend := o.retry || name.opID != ""
		id := c.nextID.Add(1)
		msg := request(id, op, body, name)
		if len(msg) > wire.MaxControl {
			// Sent, it would make the agent close the connection (1009),
			// cutting every stream on it.
			return nil, &Error{Code: CodeLimit, Message: fmt.Sprintf("%s request of %d bytes is over the %d bytes of a control frame; not sent", op, len(msg), wire.MaxControl)}
		}
		p := &pending{conn: cn, done: make(chan struct{}), onResult: o.onResult}
		c.mu.Lock()
		if c.cur != cn {
			c.mu.Unlock()
			if o.on != nil {
				return nil, ErrConnectionLost
			}
			continue
		}
		c.pending[id] = p
		c.mu.Unlock()
		if err := cn.writeText(msg); err != nil {
			c.mu.Lock()
			delete(c.pending, id)
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return nil, ErrClosed
			}
			if !resend || o.on != nil {
				return nil, fmt.Errorf("%w: %s not sent: %w", ErrConnectionLost, op, err)
			}
			if err := c.dropped(ctx, cn); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case <-p.done:
			if resend && o.on == nil && errors.Is(p.err, ErrConnectionLost) {
				continue
			}
			return p.res, p.err
		case <-ctx.Done():
			c.mu.Lock()
			if p.onResult != nil {
				p.abandoned = true // the answer must still be handled
			} else {
				delete(c.pending, id)
			}
			c.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// requestName is a request's op_id and the agent instance it was first
// sent to; zero for a request without one.
type requestName struct {
	opID, instance string
}

// request encodes a request: the params object with id, op and its name
// in front.
func request(id uint64, op string, params []byte, name requestName) []byte {
	b := make([]byte, 0, len(params)+40+len(name.opID)+len(name.instance))
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, `,"op":`...)
	b = strconv.AppendQuote(b, op)
	if name.opID != "" {
		b = append(b, `,"op_id":`...)
		b = strconv.AppendQuote(b, name.opID)
		b = append(b, `,"instance":`...)
		b = strconv.AppendQuote(b, name.instance)
	}
	if len(params) > 2 && params[0] == '{' {
		b = append(b, ',')
		return append(b, params[1:]...)
	}
	return append(b, '}')
}

// complete hands a response to its pending call. Reader goroutine only.
func (c *Client) complete(id uint64, res json.RawMessage, perr *Error) {
	c.mu.Lock()
	p := c.pending[id]
	delete(c.pending, id)
	abandoned := p != nil && p.abandoned
	c.mu.Unlock()
	if p == nil {
		return
	}
	switch {
	case perr != nil:
		p.err = perr
	case p.onResult != nil:
		p.res, p.err = res, p.onResult(p.conn, res, abandoned)
	default:
		p.res = res
	}
	close(p.done)
}

func (p *pending) fail(err error) {
	if p.onResult != nil {
		p.onResult(p.conn, nil, true)
	}
	p.err = err
	close(p.done)
}

// failEverything fails every pending call and every handle for good.
func (c *Client) failEverything(err error) {
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
		c.changedLocked()
	}
	ps := c.pending
	c.pending = make(map[uint64]*pending)
	hs := make([]*handle, 0, len(c.handles))
	for _, h := range c.handles {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	for _, p := range ps {
		p.fail(err)
	}
	for _, h := range hs {
		h.finish(nil, err)
	}
}

func (c *Client) addHandle(h *handle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handles[h.id] = h
}

func (c *Client) handle(id uint64) *handle {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handles[id]
}

func (c *Client) removeHandle(h *handle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handles[h.id] == h {
		delete(c.handles, h.id)
	}
}

func (c *Client) reportError(err error) {
	c.log.Debug("agent error", zap.Error(err))
	if c.opts.OnError != nil {
		c.opts.OnError(err)
	}
}
