package jupyter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/zap"
)

const (
	// dialRetry is short because the kernel binds its ports only once
	// Python has started; zmq4's default of 250 ms would add that much to
	// every start.
	dialRetry = 15 * time.Millisecond
	// maxMessageBytes caps what one kernel message may carry; bigger ones
	// are dropped with a note rather than passed on to clients.
	maxMessageBytes = 32 << 20
	// drainMisses is how many consecutive "closed" answers Recv must give
	// after Close before a pump stops draining: zmq4 picks at random
	// between its closed context and its queue, and a reader goroutine
	// blocked on a full queue leaks unless someone empties it.
	drainMisses = 64
)

var errClientClosed = errors.New("jupyter: kernel connection closed")

// owner receives the messages whose parent is a request it sent.
type owner interface {
	deliver(ch channel, m *message)
}

// replyWaiter is an owner that waits for one reply on shell or control.
type replyWaiter chan *message

func (w replyWaiter) deliver(ch channel, m *message) {
	if ch == chShell || ch == chControl {
		select {
		case w <- m:
		default:
		}
	}
}

// client is the agent's side of one kernel process: shell, control and
// stdin DEALERs sharing one identity (so stdin requests reach us), an
// iopub SUB subscribed to everything, and a heartbeat DEALER.
//
// Each socket has one pump goroutine, the only caller of its Recv, which
// verifies every message and hands it to the owner of its parent request
// and, for iopub, to onIOPub. Handlers run on the pump and must not block.
// close stops the pumps and waits for them.
type client struct {
	log     *zap.Logger
	sign    *signer
	session string
	onIOPub func(*message)

	ctx    context.Context
	cancel context.CancelFunc
	socks  map[channel]zmq4.Socket
	pumps  sync.WaitGroup

	mu        sync.Mutex
	owners    map[string]owner
	pings     map[string]chan struct{}
	iopubSeen chan struct{} // closed by the first iopub message
	closed    bool
	lose      *losses
}

// losses are messages a test makes a client lose, or report lost.
type losses struct {
	subscription bool         // the subscription sent with the dial
	requests     atomic.Int32 // this many of the next shell requests
	// lateExecute makes the next execute_request's send, which the kernel
	// gets, fail once the connection closes: zmq4 returned so late on a
	// loaded machine that the kernel had asked the cell's input and died.
	lateExecute atomic.Bool
}

// subscribe subscribes the iopub socket to every message; zmq4 sends the
// subscription to the connections it has and to later ones.
func (c *client) subscribe() {
	_ = c.socks[chIOPub].SetOption(zmq4.OptionSubscribe, "")
}

// dialClient connects to a kernel that is starting: each Dial retries
// until the kernel has bound its port or ctx is done.
func dialClient(ctx context.Context, info connInfo, onIOPub func(*message), log *zap.Logger, lose *losses) (*client, error) {
	c := &client{
		log: log, sign: newSigner(info.Key), session: newID(), onIOPub: onIOPub, lose: lose,
		socks: map[channel]zmq4.Socket{}, owners: map[string]owner{},
		pings: map[string]chan struct{}{}, iopubSeen: make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	opts := []zmq4.Option{
		zmq4.WithDialerRetry(dialRetry), zmq4.WithDialerMaxRetries(-1),
		zmq4.WithDialerTimeout(2 * time.Second), zmq4.WithLogger(zap.NewStdLog(log)),
	}
	identity := zmq4.WithID(zmq4.SocketIdentity(c.session))
	sub := zmq4.NewSub(c.ctx, opts...)
	c.socks[chIOPub] = sub
	// Subscribing before Dial makes zmq4 send the subscription as soon as
	// the connection is up.
	if lose == nil || !lose.subscription {
		c.subscribe()
	}
	c.socks[chShell] = zmq4.NewDealer(c.ctx, append(opts, identity)...)
	c.socks[chControl] = zmq4.NewDealer(c.ctx, append(opts, identity)...)
	c.socks[chStdin] = zmq4.NewDealer(c.ctx, append(opts, identity)...)
	c.socks[chHeartbeat] = zmq4.NewDealer(c.ctx, opts...)
	ports := map[channel]int{
		chIOPub: info.IOPubPort, chShell: info.ShellPort, chControl: info.ControlPort,
		chStdin: info.StdinPort, chHeartbeat: info.HBPort,
	}
	for _, ch := range []channel{chIOPub, chShell, chControl, chStdin, chHeartbeat} {
		if err := c.socks[ch].Dial(info.endpoint(ports[ch])); err != nil {
			c.closeSockets()
			if ctx.Err() == nil {
				// Dialing retries until the port answers; one that answers
				// with something other than our kernel's socket belongs to
				// another process.
				return nil, fmt.Errorf("connect %s: %w: %v", ch, errPortClash, err)
			}
			return nil, fmt.Errorf("connect %s: %w", ch, err)
		}
	}
	for ch, s := range c.socks {
		c.pumps.Add(1)
		go c.pump(ch, s)
	}
	return c, nil
}

// close stops the sockets and the pumps. Safe to call more than once.
func (c *client) close() {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if already {
		return
	}
	c.closeSockets()
	c.pumps.Wait()
}

func (c *client) closeSockets() {
	c.cancel()
	for _, s := range c.socks {
		s.Close()
	}
}

func (c *client) pump(ch channel, s zmq4.Socket) {
	defer c.pumps.Done()
	for {
		zm, err := s.Recv()
		if err != nil {
			if c.ctx.Err() != nil {
				drain(s)
				return
			}
			// The peer went away: zmq4 reports it once, then Recv blocks
			// until Close. The pause only guards against a busy loop.
			c.log.Debug("kernel socket read failed", zap.String("channel", string(ch)), zap.Error(err))
			select {
			case <-c.ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if ch == chHeartbeat {
			c.pong(zm.Frames)
			continue
		}
		c.handle(ch, zm.Frames)
	}
}

func drain(s zmq4.Socket) {
	for misses := 0; misses < drainMisses; {
		if _, err := s.Recv(); errors.Is(err, context.Canceled) {
			misses++
		} else {
			misses = 0
		}
	}
}

func (c *client) handle(ch channel, frames [][]byte) {
	size := 0
	for _, f := range frames {
		size += len(f)
	}
	if size > maxMessageBytes {
		c.log.Warn("dropped an oversized kernel message", zap.String("channel", string(ch)), zap.Int("bytes", size))
		return
	}
	m, err := c.sign.decode(frames)
	if err != nil {
		c.log.Warn("dropped a kernel message", zap.String("channel", string(ch)), zap.Error(err))
		return
	}
	if ch == chIOPub {
		c.mu.Lock()
		select {
		case <-c.iopubSeen:
		default:
			close(c.iopubSeen)
		}
		c.mu.Unlock()
	}
	if o := c.owner(m.ParentID); o != nil {
		o.deliver(ch, m)
	}
	if ch == chIOPub && c.onIOPub != nil {
		c.onIOPub(m)
	}
}

func (c *client) owner(msgID string) owner {
	if msgID == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owners[msgID]
}

// register routes the replies and outputs of request msgID to o.
func (c *client) register(msgID string, o owner) {
	c.mu.Lock()
	c.owners[msgID] = o
	c.mu.Unlock()
}

// claim registers o for msgID unless another owner has it: a client's
// message that reused the id of a request in flight would take that
// request's replies away from it (a cell would never end).
func (c *client) claim(msgID string, o owner) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.owners[msgID]; ok && cur != o {
		return false
	}
	c.owners[msgID] = o
	return true
}

func (c *client) unregister(msgID string) {
	c.mu.Lock()
	delete(c.owners, msgID)
	c.mu.Unlock()
}

// send signs m and sends it on a shell, control or stdin socket. zmq4
// serializes concurrent sends on one socket.
func (c *client) send(ch channel, m *message) error {
	if c.ctx.Err() != nil {
		return errClientClosed
	}
	s, ok := c.socks[ch]
	if !ok || ch == chIOPub || ch == chHeartbeat {
		return fmt.Errorf("jupyter: cannot send on %q", ch)
	}
	if c.lose != nil && ch == chShell && c.lose.requests.Add(-1) >= 0 {
		return nil
	}
	err := s.SendMulti(zmq4.NewMsgFrom(c.sign.encode(m)...))
	if err == nil && c.lose != nil && m.MsgType == "execute_request" && c.lose.lateExecute.CompareAndSwap(true, false) {
		<-c.ctx.Done()
		return c.ctx.Err()
	}
	return err
}

// request sends a message of the agent's own and waits for its reply.
func (c *client) request(ctx context.Context, ch channel, msgType string, body any) (*message, error) {
	m, err := newMessage(c.session, msgType, nil, body)
	if err != nil {
		return nil, err
	}
	w := make(replyWaiter, 1)
	c.register(m.MsgID, w)
	defer c.unregister(m.MsgID)
	if err := c.send(ch, m); err != nil {
		return nil, err
	}
	select {
	case r := <-w:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, errClientClosed
	}
}

// ping sends a heartbeat nonce and waits for its echo. The heartbeat is a
// ROUTER echoing whatever it gets; a DEALER with an empty first frame
// stands in for jupyter_client's REQ, and unknown nonces are stale echoes.
func (c *client) ping(ctx context.Context) error {
	nonce := newID()
	echo := make(chan struct{})
	c.mu.Lock()
	c.pings[nonce] = echo
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pings, nonce)
		c.mu.Unlock()
	}()
	if c.ctx.Err() != nil {
		return errClientClosed
	}
	if err := c.socks[chHeartbeat].SendMulti(zmq4.NewMsgFrom([]byte{}, []byte(nonce))); err != nil {
		return err
	}
	select {
	case <-echo:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return errClientClosed
	}
}

func (c *client) pong(frames [][]byte) {
	if len(frames) == 0 {
		return
	}
	nonce := string(frames[len(frames)-1])
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.pings[nonce]; ok {
		close(ch)
		delete(c.pings, nonce)
	}
}
