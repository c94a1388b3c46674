// Package endpoint serves the agent's one HTTP endpoint: health, traffic,
// metrics, host calls, and the websocket that multiplexes every stream.
//
// Each websocket connection is a Session with one reader goroutine (frames
// in, dispatched to ops), one writer goroutine (the only one that writes,
// control frames ahead of bulk data), and one pump goroutine per attachment
// that pulls its stream's log within the attachment's window. Producers
// never see a connection, so one slow client cannot slow anything else.
package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Config is what the server needs. Capability fields left nil make their
// ops answer `unsupported`.
type Config struct {
	Logger  *zap.Logger
	Version string
	Auth    *Auth
	Streams *stream.Registry
	Traffic *traffic.Counter
	Procs   Execer
	PTYs    PTYs
	Watches Watches
	Kernels Kernels
	Files   *files.Manager
	// Resume owns the resume generation; nil reports generation 0 and
	// makes POST /v1/resume unsupported.
	Resume Resumer
	// Defaults are the process defaults that POST /v1/init changes.
	Defaults *proc.Defaults
	// SetClock sets the wall clock for /v1/init's time_unix_ns.
	SetClock func(time.Time) error
	// Metrics adds lines to /metrics (Prometheus text format).
	Metrics func(w *MetricsWriter)
	// MaxConns is how many connections are served at once (see conns.go);
	// 0 derives it from the descriptor limit (ConnLimitFor).
	MaxConns int
	// IdleTimeout closes idle keep-alive connections; 0 is
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Server is the HTTP endpoint. Build with New, run with Serve.
type Server struct {
	cfg     Config
	log     *zap.Logger
	ops     map[string]op
	started time.Time
	mux     *http.ServeMux
	methods map[string]string // each route's method, for answering the others
	http    *http.Server
	conns   *conns

	// initMu makes each /v1/init whole: two first calls cannot both find
	// no token and both set one. initDone: an init succeeded, so the
	// open first call is used up.
	initMu   sync.Mutex
	initDone atomic.Bool

	mu       sync.Mutex
	sessions map[*Session]struct{}
	others   []*http.Server // ServeAlso's
	closing  bool
	wg       sync.WaitGroup
}

// New builds the server and its routes.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Auth == nil {
		cfg.Auth = NewAuth("")
	}
	if cfg.Traffic == nil {
		cfg.Traffic = traffic.NewCounter()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, started: time.Now(), sessions: make(map[*Session]struct{})}
	s.ops = s.buildOps()
	s.mux = http.NewServeMux()
	s.methods = map[string]string{}
	for _, rt := range []struct {
		method, path string
		h            http.HandlerFunc
	}{
		{"GET", "/health", s.handleHealth},
		{"GET", "/v1/connect", s.authed(s.handleConnect)},
		{"GET", "/v1/traffic", s.authed(s.handleTraffic)},
		{"GET", "/metrics", s.authed(s.handleMetrics)},
		{"POST", "/v1/init", s.handleInit},
		{"POST", "/v1/resume", s.authed(s.handleResume)},
		{"GET", "/v1/files", s.authed(s.countHTTP(s.handleFileGet))},
		{"HEAD", "/v1/files", s.authed(s.countHTTP(s.handleFileGet))},
		{"PUT", "/v1/files", s.authed(s.countHTTP(s.handleFilePut))},
		{"POST", "/v1/files", s.authed(s.countHTTP(s.handleFilePost))},
	} {
		s.mux.HandleFunc(rt.method+" "+rt.path, rt.h)
		if m, ok := s.methods[rt.path]; ok {
			s.methods[rt.path] = m + ", " + rt.method
		} else {
			s.methods[rt.path] = rt.method
		}
	}
	s.mux.HandleFunc("/", s.handleNoRoute)
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = ConnLimitFor(fdLimit())
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	s.conns = newConns(cfg.MaxConns, s.log)
	s.http = s.server(s.mux, cfg.IdleTimeout)
	return s
}

// server is an http.Server for h under the agent's connection limits
// (conns.go). No ReadTimeout or WriteTimeout: surfaces stream for
// minutes (websockets, downloads, long responses). Handlers that read
// small bodies set their own deadline.
func (s *Server) server(h http.Handler, idle time.Duration) *http.Server {
	return &http.Server{
		Handler:           s.limit(h),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idle,
		ConnState:         s.conns.setState,
		ConnContext:       connContext,
	}
}

// Mount serves another surface (an adapter speaking some other client's
// wire format) on the same listener. pattern is a net/http ServeMux
// pattern; it must not overlap the agent's own routes. The handler does
// its own auth (through Auth.Valid) and traffic counting.
func (s *Server) Mount(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Handler returns the HTTP handler, for tests that run their own listener.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve accepts connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.http.Serve(s.conns.listen(l))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeAlso serves h (another surface, alone on a listener of its own)
// on l until Shutdown, with the timeouts and connection limits of the
// agent's listener. The limits are shared: every connection costs a
// descriptor of the same process, whichever listener took it.
func (s *Server) ServeAlso(l net.Listener, h http.Handler) error {
	hs := s.server(h, s.http.IdleTimeout)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.others = append(s.others, hs)
	s.mu.Unlock()
	err := hs.Serve(s.conns.listen(l))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting (on ServeAlso's listeners too), closes every
// websocket with 1001 (going away) and waits for the sessions to end, or
// for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	sessions := make([]*Session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	others := s.others
	s.mu.Unlock()
	for _, hs := range others {
		hs.Shutdown(ctx)
	}
	err := s.http.Shutdown(ctx)
	for _, ss := range sessions {
		ss.closeWith(closeGoingAway, "agent shutting down")
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// Sessions returns the open websocket sessions.
func (s *Server) Sessions() []*Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Session, 0, len(s.sessions))
	for ss := range s.sessions {
		out = append(out, ss)
	}
	return out
}

func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.Auth.Check(r) {
			writeError(w, http.StatusUnauthorized, wire.Errorf(wire.CodeBadRequest, "missing or wrong access token"))
			return
		}
		h(w, r)
	}
}

// handleNoRoute answers what no route takes with a JSON error, like every
// other HTTP error of the agent.
func (s *Server) handleNoRoute(w http.ResponseWriter, r *http.Request) {
	if m, ok := s.methods[r.URL.Path]; ok {
		w.Header().Set("Allow", m)
		writeError(w, http.StatusMethodNotAllowed, wire.Errorf(wire.CodeBadRequest, "%s takes %s, not %s", r.URL.Path, m, r.Method))
		return
	}
	writeError(w, http.StatusNotFound, wire.Errorf(wire.CodeNotFound, "no route %s", r.URL.Path))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, e *wire.Error) {
	writeJSON(w, status, map[string]*wire.Error{"error": e})
}
