package surface

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/wire"
)

// Connection limits. Anyone who can reach the port can open connections,
// token or not, and each costs a file descriptor: without limits a peer
// exhausts the agent's descriptors, after which it can neither accept
// (websocket dials hang in the backlog) nor start processes. So:
//
//   - at most maxConns connections are served at once, of which at most
//     maxUnauth have not yet shown the token;
//   - a connection over a limit first evicts one that costs nothing to
//     close: an idle keep-alive connection, else one that has not sent a
//     request yet, else one whose request without the token has been
//     served longer than staleUnauth; unauthenticated ones first, oldest
//     first (a request that showed the token and an established
//     websocket are never evicted);
//   - if none can go, it is a reserve connection: it may make one request
//     to /health or a host route (the host must see the sandbox even
//     while it is flooded), anything else gets 503 unavailable. A full
//     reserve evicts its own oldest idle connection, or the new one is
//     closed at once.
//
// A client connects and sends its request at once, so under a flood of
// request-less connections it is the flood's older connections that go;
// a request that has arrived but is not read yet counts as sent.
const (
	// reserveConns is how many connections beyond maxConns serve /health
	// and the host routes.
	reserveConns = 16
	// maxConnsCap bounds maxConns whatever the descriptor limit: each
	// connection also costs memory.
	maxConnsCap = 10000
	// DefaultIdleTimeout closes keep-alive connections idle that long.
	DefaultIdleTimeout = 60 * time.Second
	// readHeaderTimeout bounds reading a request's header.
	readHeaderTimeout = 10 * time.Second
	// staleUnauth is how long a request without the token is served
	// before its connection may be evicted: as long as a peer has to
	// send a header, so a slow body holds a slot no longer than a slow
	// header does. Signed file transfers (envd) are such requests.
	staleUnauth = readHeaderTimeout
	// maxUnreadSkips bounds how many connections with an unread request
	// one eviction passes over.
	maxUnreadSkips = 8
)

// ConnLimitFor is the number of connections served at once for a
// descriptor limit: a quarter of the descriptors (at least 64) stays for
// processes, pipes, kernels and files, and reserveConns for the reserve.
func ConnLimitFor(nofile uint64) int {
	headroom := max(nofile/4, 64)
	if nofile <= headroom+reserveConns+8 {
		return 8
	}
	return int(min(nofile-headroom-reserveConns, maxConnsCap))
}

// fdLimit is the process's soft descriptor limit.
func fdLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return rl.Cur
}

// conn is one accepted connection.
type conn struct {
	net.Conn
	t       *conns
	since   time.Time
	reserve bool // over the limits when accepted: host routes only
	closed  atomic.Bool

	// Guarded by t.mu.
	state   http.ConnState
	changed time.Time
	authed  bool
}

var _ io.ReaderFrom = (*conn)(nil)

// NetConn is the accepted connection itself (for its socket: RawSocket).
func (c *conn) NetConn() net.Conn { return c.Conn }

// ReadFrom keeps the socket's own (sendfile, splice): net/http sends a
// file body through it, and the embedded interface alone would hide it.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

func (c *conn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.t.forget(c)
	}
	return c.Conn.Close()
}

// conns tracks the server's connections and applies the limits.
type conns struct {
	log       *zap.Logger
	maxConns  int
	maxUnauth int
	stale     time.Duration // an unauthenticated request served that long may be evicted

	mu       sync.Mutex
	open     map[*conn]struct{} // every connection, reserve ones too
	normal   int                // served normally
	unauth   int                // of normal, not authenticated
	reserved int                // reserve connections

	refused, evicted atomic.Uint64
	lastWarn         atomic.Int64 // unix ns
}

func newConns(maxConns int, log *zap.Logger) *conns {
	return &conns{log: log, maxConns: maxConns, maxUnauth: max(maxConns/2, 1), stale: staleUnauth, open: map[*conn]struct{}{}}
}

// listener applies the limits at accept.
type listener struct {
	net.Listener
	t *conns
}

func (t *conns) listen(l net.Listener) net.Listener { return &listener{Listener: l, t: t} }

func (l *listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.t.admit(nc); c != nil {
			return c, nil
		}
		nc.Close()
	}
}

// admit tracks a new connection, evicting another if it must; nil means
// refuse it.
func (t *conns) admit(nc net.Conn) *conn {
	now := time.Now()
	c := &conn{Conn: nc, t: t, since: now, state: http.StateNew, changed: now}
	t.mu.Lock()
	var victims []*conn
	evict := func(reserve bool) {
		if v := t.victimLocked(reserve); v != nil {
			t.dropLocked(v)
			victims = append(victims, v)
		}
	}
	if t.normal >= t.maxConns || t.unauth >= t.maxUnauth {
		evict(false)
	}
	if t.normal >= t.maxConns || t.unauth >= t.maxUnauth {
		c.reserve = true
		if t.reserved >= reserveConns {
			evict(true)
		}
	}
	switch {
	case !c.reserve:
		t.normal++
		t.unauth++
		t.open[c] = struct{}{}
	case t.reserved < reserveConns:
		t.reserved++
		t.open[c] = struct{}{}
	default:
		c = nil
	}
	t.mu.Unlock()
	for _, v := range victims {
		t.evicted.Add(1)
		v.Conn.Close() // already forgotten
	}
	if c == nil || c.reserve {
		t.refused.Add(1)
		t.warn()
	}
	return c
}

// victimLocked picks the connection to evict among the normal or the
// reserve ones: idle before request-less before stale, unauthenticated
// first (only those while too many are), oldest first. An idle or new
// connection whose request is already in its socket buffer is not
// silent, only not read yet (a flood being accepted on another listener
// can outpace the goroutine that reads it): it is passed over, up to
// maxUnreadSkips of them, so a flood whose every connection sends a byte
// at once costs a bounded number of scans per admission.
func (t *conns) victimLocked(reserve bool) *conn {
	var waiting map[*conn]bool
	for {
		c := t.candidateLocked(reserve, waiting)
		if c == nil || c.state == http.StateActive || len(waiting) == maxUnreadSkips || !unread(c.Conn) {
			return c
		}
		if waiting == nil {
			waiting = map[*conn]bool{}
		}
		waiting[c] = true
	}
}

// candidateLocked is victimLocked's pick among the connections not in
// skip, by state and age alone.
func (t *conns) candidateLocked(reserve bool, skip map[*conn]bool) *conn {
	now := time.Now()
	var best *conn
	rank := func(c *conn) int {
		r := 0
		switch c.state {
		case http.StateNew:
			r += 2
		case http.StateActive:
			r += 4
		}
		if c.authed {
			r++
		}
		return r
	}
	for c := range t.open {
		switch {
		case c.reserve != reserve || skip[c]:
			continue
		case c.state == http.StateIdle || c.state == http.StateNew:
		case c.state == http.StateActive && !c.authed && now.Sub(c.changed) >= t.stale:
		default:
			continue
		}
		if c.authed && !reserve && t.unauth >= t.maxUnauth {
			continue // it would not make room
		}
		if best == nil || rank(c) < rank(best) || (rank(c) == rank(best) && c.changed.Before(best.changed)) {
			best = c
		}
	}
	return best
}

// unread reports whether nc's socket holds bytes the server has not read.
func unread(nc net.Conn) bool {
	n, ok := SocketCount(RawSocket(nc), unix.SIOCINQ)
	return ok && n > 0
}

// dropLocked stops tracking c; its Close then does nothing more.
func (t *conns) dropLocked(c *conn) {
	c.closed.Store(true)
	delete(t.open, c)
	switch {
	case c.reserve:
		t.reserved--
	case c.authed:
		t.normal--
	default:
		t.normal--
		t.unauth--
	}
}

func (t *conns) forget(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.open[c]; ok {
		t.dropLocked(c)
	}
}

// setState is the http.Server's ConnState hook.
func (t *conns) setState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	t.mu.Lock()
	c.state, c.changed = state, time.Now()
	t.mu.Unlock()
}

// authenticated marks c as having shown the token.
func (t *conns) authenticated(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.open[c]; ok && !c.authed {
		c.authed = true
		if !c.reserve {
			t.unauth--
		}
	}
}

// warn logs that connections are refused, at most every 10 s.
func (t *conns) warn() {
	now := time.Now().UnixNano()
	last := t.lastWarn.Load()
	if now-last < int64(10*time.Second) || !t.lastWarn.CompareAndSwap(last, now) {
		return
	}
	t.log.Warn("too many connections: serving only /health and host routes on new ones",
		zap.Int("max_connections", t.maxConns), zap.Int("max_unauthenticated", t.maxUnauth),
		zap.Uint64("refused_total", t.refused.Load()), zap.Uint64("evicted_total", t.evicted.Load()))
}

type connKey struct{}

// connContext is the http.Server's ConnContext hook.
func connContext(ctx context.Context, nc net.Conn) context.Context {
	if c, ok := nc.(*conn); ok {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// limit wraps the server's handler: it records which connections showed
// the token and keeps reserve connections to the host routes.
//
// A request that showed no token (or came on a reserve connection) and
// whose handler left its body unread loses its connection once answered:
// net/http would otherwise read the rest of the body before answering,
// with no deadline, and a peer that never sends it would hold the
// connection, in use and so never evicted, for good.
func (s *Server) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*conn)
		if c == nil {
			next.ServeHTTP(w, r)
			return
		}
		shown := s.auth.Shown(r)
		if shown {
			s.conns.authenticated(c)
		}
		if c.reserve {
			// One request, then the reserve slot is free again.
			w.Header().Set("Connection", "close")
			if !s.host[r.URL.Path] {
				WriteError(w, http.StatusServiceUnavailable, wire.Errorf(wire.CodeUnavailable, "the agent has too many connections open; try again shortly"))
				dropBody(w, r)
				return
			}
		} else if shown {
			next.ServeHTTP(w, r)
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body := &eofReader{ReadCloser: r.Body}
		r.Body = body
		next.ServeHTTP(w, r)
		if !body.eof {
			dropBody(w, r)
		}
	})
}

// dropBody makes net/http give up the rest of r's body, and with it the
// connection, instead of reading it before the answer goes out.
func dropBody(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// eofReader records whether its reader reached the end.
type eofReader struct {
	io.ReadCloser
	eof bool
}

func (b *eofReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}
