package endpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Subprotocol is the websocket subprotocol of this protocol version.
const Subprotocol = "rayito.v1"

// Per-connection limits: a misbehaving client gets `limit` errors instead
// of unbounded agent memory.
const (
	maxAttachments = 4096 // attachments per connection
	maxInflightOps = 64   // slow ops running at once per connection
	controlQueue   = 256  // responses and events waiting for the writer
	dataQueue      = 16   // data frames waiting for the writer
)

// Close codes the agent uses.
const (
	closeGoingAway websocket.StatusCode = 1001
	closeResumed   websocket.StatusCode = 4000
)

// Session is one websocket connection.
type Session struct {
	srv    *Server
	conn   *websocket.Conn
	client string          // who the connection is from, for shares (surface.ClientOf)
	sock   syscall.RawConn // conn's socket, nil if none (sendroom.go)
	log    *zap.Logger
	ctx    context.Context
	cancel context.CancelFunc

	ctrl    chan outFrame // control frames: go first
	data    chan outFrame // attachment frames: in order per attachment
	out     outGate       // who may write to the connection, and when
	sem     chan struct{} // bounds slow ops in flight
	ordered chan func()   // ordered ops, run one at a time in arrival order
	// orderedOnce starts the ordered ops' goroutine at the first of them:
	// most connections never send one, and an agent serving hundreds of
	// connections would keep as many idle goroutines and their stacks.
	orderedOnce sync.Once
	// The reading of the connection (brief.go): briefSeq numbers the
	// brief ops the reader runs (only the current reader touches it),
	// briefRunning is the one running (0: none).
	briefSeq     uint64
	briefRunning atomic.Uint64

	writerDone chan struct{} // closed when the writer has stopped
	reportsDue chan struct{} // input reports wait for the writer (reports.go)

	mu         sync.Mutex
	atts       map[uint64]*attachment
	feeding    map[uint64]*stream.Input // inputs this connection is told the progress of
	reports    map[uint64][2]uint64     // input reports waiting for the writer (reports.go)
	reserved   int                      // attachment slots claimed by ops still creating their stream
	closeCode  websocket.StatusCode
	closeWhy   string
	pumps      sync.WaitGroup
	generation uint64 // resume generation when the session opened
	untrack    func() // leaves the registry of long-lived connections
	draining   bool   // a resume is closing the session: no new requests
	cutting    bool   // a resume is ending its attachments: no new ones
	closed     bool   // the connection is gone: no new attachments
	// Requests taken and not yet answered; a resume's cut waits for them
	// (answeredAll is closed when they reach 0 while it waits).
	inflight    int
	answeredAll chan struct{}
}

// outFrame is one message for the writer. A frame with close set ends the
// session after everything queued before it has been written.
type outFrame struct {
	binary  bool
	msg     []byte
	payload []byte // when set, msg is a data frame's header and this its payload
	release func()
	close   bool
	// lifecycle: a frame the agent sends of its own about the sandbox
	// (suspending, resumed), not traffic: it must not keep a sandbox
	// that its host pauses for idleness awake.
	lifecycle bool
}

func (s *Server) handleConnect(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Cuts.Closing() {
		writeError(w, http.StatusServiceUnavailable, wire.Errorf(wire.CodeUnavailable, "agent is shutting down"))
		return
	}
	hc := &hijackCapture{ResponseWriter: w}
	conn, err := websocket.Accept(hc, r, s.cfg.Origins.AcceptOptions(websocket.AcceptOptions{
		Subprotocols:    []string{Subprotocol},
		CompressionMode: websocket.CompressionDisabled,
	}))
	if err != nil {
		return
	}
	conn.SetReadLimit(wire.MaxMessage)
	ctx, cancel := context.WithCancel(context.Background())
	ss := &Session{
		srv: s, conn: conn, client: surface.ClientOf(r), sock: surface.RawSocket(hc.conn), log: s.log, ctx: ctx, cancel: cancel,
		ctrl: make(chan outFrame, controlQueue), data: make(chan outFrame, dataQueue),
		sem: make(chan struct{}, maxInflightOps), ordered: make(chan func(), maxInflightOps),
		atts: make(map[uint64]*attachment), writerDone: make(chan struct{}), reportsDue: make(chan struct{}, 1),
	}
	// The generation is read as the session is registered: it is either
	// cut by a resume or opened under its generation, and either closed
	// by a shutdown or refused here.
	if ss.generation, ss.untrack, err = s.cfg.Cuts.Track(ss); err != nil {
		cancel()
		conn.Close(closeGoingAway, "agent shutting down")
		return
	}
	s.cfg.Traffic.ConnOpened()
	ss.run()
}

// Generation is the resume generation at which the session opened.
func (ss *Session) Generation() uint64 { return ss.generation }

// run starts the writer and reads the connection. It returns once the
// session has ended, or sooner if a brief op it ran passed the reading to
// another goroutine, which then ends the session (brief.go): a blocked
// op never holds a closed connection's session open.
func (ss *Session) run() {
	h := map[string]any{"event": "hello", "protocol": 1, "version": ss.srv.cfg.Version, "generation": ss.generation, "instance": ss.srv.instance(),
		"input_offsets": true, "op_ids": true}
	if ss.srv.suspending.Load() {
		h["suspending"] = true
	}
	hello, _ := jsonBytes(h)
	ss.queue(ss.ctrl, outFrame{msg: hello})
	go func() {
		defer close(ss.writerDone)
		ss.writeLoop()
	}()
	ss.read()
}

// finish ends the session once its reading is over, on the goroutine that
// read last.
func (ss *Session) finish() {
	ss.cancel()
	<-ss.writerDone
	ss.conn.CloseNow()
	// Slow ops, and a brief op that passed the reading on, may still
	// finish: they must not start pumps after this.
	ss.mu.Lock()
	ss.closed = true
	ss.mu.Unlock()
	ss.pumps.Wait()
	ss.unfeed()
	ss.srv.cfg.Traffic.ConnClosed()
	ss.untrack()
}

// Leave closes the session with 1001 (going away), ahead of queued data:
// the agent is stopping (surface.Cuts.Shutdown waits for its end).
func (ss *Session) Leave(context.Context) {
	ss.closeWith(closeGoingAway, "agent shutting down")
}

// readLoop reads frames until the connection fails or is closed (it
// answers true) or a brief op passed the reading to another goroutine
// (false). Its read has no context on purpose: cancelling one makes the
// library drop the connection without the close frame a resume must send.
func (ss *Session) readLoop() bool {
	counter := ss.srv.cfg.Traffic
	tooBig := false
	var buf []byte
	for {
		typ, msg, err := ss.readMessage(&buf)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				ss.log.Debug("oversized frame closed the connection", zap.Error(err))
			}
			return true
		}
		counter.In(len(msg))
		if tooBig {
			continue // closing: keep reading only for the peer's close frame
		}
		// The read limit leaves room for a data frame's header, so a
		// message just over a limit of section 2 gets here.
		if typ == websocket.MessageBinary {
			tooBig = ss.handleData(msg)
		} else if len(msg) > wire.MaxControl {
			tooBig = true
		} else if ss.handleControl(msg) {
			return false
		}
		if tooBig {
			ss.closeWith(websocket.StatusMessageTooBig, "message too big")
		}
	}
}

// readMessage reads one message. A data frame is read into *buf, reused
// for the next one (input is copied by whoever queues it), which spares
// an upload an allocation and a zeroing per frame; a control frame gets a
// buffer of its own, since a slow op keeps its request.
func (ss *Session) readMessage(buf *[]byte) (websocket.MessageType, []byte, error) {
	typ, r, err := ss.conn.Reader(context.Background())
	if err != nil {
		return typ, nil, err
	}
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return typ, nil, err
		}
	}
	if typ != websocket.MessageBinary {
		return typ, bytes.Clone(b), nil
	}
	*buf = b
	return typ, b, nil
}

// writeLoop writes the frames that were queued (control frames that
// found the connection busy, and every data frame). Control frames always
// go before data frames that are waiting.
func (ss *Session) writeLoop() {
	for {
		var f outFrame
		select {
		case f = <-ss.ctrl:
		default:
			select {
			case f = <-ss.ctrl:
			case f = <-ss.data:
				// A control frame queued before this one (the response
				// announcing its stream) may have become ready at once.
				if !ss.flushControl() {
					ss.dropQueued(f)
					return
				}
			case <-ss.reportsDue:
				if !ss.writeReports() {
					return
				}
				continue
			case <-ss.ctx.Done():
				return
			}
		}
		if !ss.writeQueued(f) {
			return
		}
	}
}

// flushControl writes the control frames that are waiting; false if the
// session ended meanwhile.
func (ss *Session) flushControl() bool {
	for {
		select {
		case f := <-ss.ctrl:
			if !ss.writeQueued(f) {
				return false
			}
		default:
			return true
		}
	}
}

// outGate lets a control frame be written by the goroutine that has it,
// when nothing is queued and nobody is writing, instead of waking the
// writer: a hand-off to another goroutine makes the runtime start a
// thread on the other vCPU as well, which on a VM costs more than the
// write (docs/benchmarks.md, Keystroke echo: a request answered on the
// reader 54 to 67 µs round trip instead of 92 to 131). A frame that finds
// anything pending queues behind it, so frames keep their order. Data
// frames queue too, but for a little output to an idle connection, which
// the goroutine that produced it writes itself (deliver in attach.go: a
// keystroke's echo): the writer's pace is what lets an attachment gather
// output into large frames (written by their pumps directly, 256 MiB of
// output moved at 0.34 to 0.44 of the pipe's rate instead of 0.53 to
// 0.58).
//
// The reader may thus write, and block while the client does not read
// (as it blocks on a full control queue without this); other connections
// are not affected.
type outGate struct {
	pending atomic.Int64 // frames queued and not yet written or dropped
	writing sync.Mutex   // held by whoever writes to the connection
	// writerHook, if set (tests), runs in the writer before it writes a
	// frame it took from the queues: a writer slow to get its turn.
	writerHook atomic.Pointer[func()]
}

// queue puts f on ch for the writer; false if the session ended first.
func (ss *Session) queue(ch chan outFrame, f outFrame) bool {
	ss.out.pending.Add(1)
	select {
	case ch <- f:
		return true
	case <-ss.ctx.Done():
		ss.dropQueued(f)
		return false
	}
}

// writeQueued writes a frame that was queued.
func (ss *Session) writeQueued(f outFrame) bool {
	if hook := ss.out.writerHook.Load(); hook != nil {
		(*hook)()
	}
	ss.out.writing.Lock()
	ok := ss.write(f)
	ss.out.pending.Add(-1)
	ss.out.writing.Unlock()
	return ok
}

// dropQueued lets go of a queued frame that will not be written.
func (ss *Session) dropQueued(f outFrame) {
	if f.release != nil {
		f.release()
	}
	ss.out.pending.Add(-1)
}

// write sends one frame, or performs the close it asks for.
func (ss *Session) write(f outFrame) bool {
	if f.close {
		// Everything queued before the close is written: release now, not
		// after the handshake, or a silent peer would hold a resume for
		// the library's 5 s close wait.
		if f.release != nil {
			f.release()
		}
		ss.mu.Lock()
		code, why := ss.closeCode, ss.closeWhy
		ss.mu.Unlock()
		// Close writes the close frame and waits (bounded) for the peer's;
		// the read loop then sees the connection end.
		ss.conn.Close(code, why)
		return false
	}
	if f.release != nil {
		defer f.release()
	}
	typ := websocket.MessageText
	if f.binary {
		typ = websocket.MessageBinary
	}
	// Counted as the frame is handed to the connection, as HTTP responses
	// are: a client that has read it finds it counted.
	if !f.lifecycle {
		ss.srv.cfg.Traffic.Out(len(f.msg) + len(f.payload))
	}
	var err error
	if f.payload != nil {
		err = ss.writeFragments(typ, f.msg, f.payload)
	} else {
		err = ss.conn.Write(ss.ctx, typ, f.msg)
	}
	if err != nil {
		ss.conn.CloseNow()
		return false
	}
	return true
}

// writeFragments writes one message from two pieces, each a fragment of
// its own, so that neither is copied into the other.
func (ss *Session) writeFragments(typ websocket.MessageType, head, rest []byte) error {
	w, err := ss.conn.Writer(ss.ctx, typ)
	if err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	if _, err := w.Write(rest); err != nil {
		return err
	}
	return w.Close()
}

// sendControl writes a control frame at once if the connection is idle,
// else queues it; it gives up when the session ends.
func (ss *Session) sendControl(msg []byte) {
	f := outFrame{msg: msg}
	if !ss.out.writing.TryLock() {
		ss.queue(ss.ctrl, f)
		return
	}
	// A queued frame counts from before it is sent until it is written,
	// so none is waiting or half-way to the writer.
	if ss.out.pending.Load() > 0 {
		ss.out.writing.Unlock()
		ss.queue(ss.ctrl, f)
		return
	}
	ss.write(f)
	ss.out.writing.Unlock()
}

// sendData queues an attachment frame in order; false if the session ended.
func (ss *Session) sendData(f outFrame) bool {
	return ss.queue(ss.data, f)
}

// closeWith closes the session with a close code, ahead of queued data.
func (ss *Session) closeWith(code websocket.StatusCode, why string) {
	if ss.setClose(code, why) {
		ss.queue(ss.ctrl, outFrame{close: true})
	}
}

// setClose records the close code; only the first caller wins.
func (ss *Session) setClose(code websocket.StatusCode, why string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closeCode != 0 {
		return false
	}
	ss.closeCode, ss.closeWhy = code, why
	return true
}

// takeRequest counts a request read from the connection, to be answered;
// false once a resume's cut began: the request is never run.
func (ss *Session) takeRequest() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.draining {
		return false
	}
	ss.inflight++
	return true
}

// answered counts a request taken as answered (its response queued, or
// the connection gone).
func (ss *Session) answered() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.inflight--
	if ss.inflight == 0 && ss.answeredAll != nil {
		close(ss.answeredAll)
		ss.answeredAll = nil
	}
}

// stopTaking refuses new requests and returns a channel closed once
// those taken are answered.
func (ss *Session) stopTaking() <-chan struct{} {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.draining = true
	done := make(chan struct{})
	if ss.inflight == 0 {
		close(done)
	} else {
		if ss.answeredAll != nil {
			close(ss.answeredAll)
		}
		ss.answeredAll = done
	}
	return done
}

// abandon gives up a request that never ran: a repeat of its op_id runs it.
func (ss *Session) abandon(c *call) {
	if c.outcome != nil {
		ss.srv.outcomes.abandon(c.outcome)
		c.outcome = nil
	}
}

func (ss *Session) sendError(e *wire.Error, stream uint64) {
	m := map[string]any{"event": "error", "error": e}
	if stream != 0 {
		m["stream"] = stream
	}
	b, _ := jsonBytes(m)
	ss.sendControl(b)
}
