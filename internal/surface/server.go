package surface

import (
	"context"
	"errors"
	stdlog "log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/wire"
)

// A Surface is one wire format's routes (the native protocol, the host
// API, envd's API, jupyter_server's, the code interpreter's), with how
// its clients present the token and how it refuses them.
type Surface struct {
	// Name names the surface in logs, and for ServeOnly.
	Name string
	// Tokens finds the token where this surface's clients put it.
	Tokens TokenFinder
	// Refuse answers a request refused for want of the token (err is
	// ErrNoToken, ErrWrongToken or ErrNoTokenSet, or what a route's Proof
	// said), in the surface's format; nil answers 401 in the agent's.
	Refuse func(w http.ResponseWriter, r *http.Request, err error)
	// Open serves every route without a token (envd's --envd-open).
	Open bool
	// Routes are the surface's handlers.
	Routes []Route
	// NotFound answers what no route takes on a listener the surface has
	// to itself (ServeOnly); nil: net/http's 404.
	NotFound http.Handler
	// Lived is the registry the surface tracks its long-lived
	// connections in (websockets, streamed calls): a shutdown closes its
	// Leavers and refuses new entries (Cuts.Shutdown). Surfaces may share
	// one; nil: none.
	Lived *Cuts
	// Stop, if set, lets go of what else the surface holds when the agent
	// shuts down (parked relays), within ctx, beside Lived's shutdown.
	Stop func(ctx context.Context)
}

// Access says who may call a route.
type Access uint8

const (
	// Token: a request must present the agent's token in one of the
	// surface's forms (or pass the route's Proof).
	Token Access = iota
	// Public: anyone; the handler decides (health, the first init).
	Public
)

// A Route is one handler of a surface.
type Route struct {
	// Pattern is a net/http ServeMux pattern, with or without a method.
	Pattern string
	Handler http.Handler
	Access  Access
	// Proof, if set, is another way in when the token is not shown
	// (envd's signed file URLs): nil lets the request in, an error is
	// what the refusal says.
	Proof func(r *http.Request) error
	// Count counts the bodies as traffic (a transfer keeps the sandbox
	// awake); websockets count their own messages.
	Count bool
	// Host marks a route the host needs even while the agent is flooded:
	// it is served on reserve connections too (conns.go).
	Host bool
	// Private marks a route only the host calls (init, resume): no CORS,
	// so no page may call it from a browser, whatever the origins.
	Private bool
	// HostOnly marks a route that changes the sandbox's life (init,
	// pause, resume, upgrade): once a host listener serves (ServeHost),
	// it is served there alone, and every other listener answers 404.
	HostOnly bool
}

// Options configure a Server.
type Options struct {
	Logger  *zap.Logger
	Auth    *Auth            // nil: a new Auth without a token
	Traffic *traffic.Counter // nil: a counter of its own
	// MaxConns is how many connections are served at once (conns.go);
	// 0 derives it from the descriptor limit (ConnLimitFor).
	MaxConns int
	// IdleTimeout closes idle keep-alive connections; 0 is
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Origins are the pages that may call the agent from a browser
	// (cors.go); the zero value is any origin.
	Origins Origins
}

// Server serves every mounted surface on its listeners, under one set
// of connection limits. Mount every surface before Serve.
type Server struct {
	o       Options
	log     *zap.Logger
	auth    *Auth
	mux     *http.ServeMux
	methods map[string][]string // a path's methods, for answering the others
	host    map[string]bool     // paths served on reserve connections
	private map[string]bool     // paths no page may call (Route.Private)
	conns   *conns
	named   map[string]*Surface
	onState func(http.ConnState) // a test's view of connection states
	gate    *gate                // every listener's accepts, for a handover
	// hostApart: a host listener serves the HostOnly routes (ServeHost).
	hostApart atomic.Bool

	mu      sync.Mutex
	servers []*http.Server
	stops   []func(context.Context)
	lived   []*Cuts // the surfaces' registries, each once
	closing bool
}

// New builds a server with no surface yet.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Auth == nil {
		o.Auth = NewAuth("")
	}
	if o.Traffic == nil {
		o.Traffic = traffic.NewCounter()
	}
	if o.MaxConns <= 0 {
		o.MaxConns = ConnLimitFor(fdLimit())
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	s := &Server{
		o: o, log: o.Logger, auth: o.Auth, mux: http.NewServeMux(),
		methods: map[string][]string{}, host: map[string]bool{}, private: map[string]bool{}, named: map[string]*Surface{},
	}
	s.mux.HandleFunc("/", s.noRoute)
	s.conns = newConns(o.MaxConns, s.log)
	s.gate = newGate()
	return s
}

// MaxConns is how many connections are served at once.
func (s *Server) MaxConns() int { return s.o.MaxConns }

// ConnStats are the connection limiter's counters.
type ConnStats struct {
	Refused uint64 // connections over the limits: served host routes only, or closed
	Evicted uint64 // idle connections closed to make room
}

// Conns returns the connection limiter's counters.
func (s *Server) Conns() ConnStats {
	return ConnStats{Refused: s.conns.refused.Load(), Evicted: s.conns.evicted.Load()}
}

// Mount adds a surface's routes to every listener. Patterns must not
// overlap another surface's (net/http panics if they do).
func (s *Server) Mount(sf Surface) {
	if sf.Tokens == nil {
		sf.Tokens = func(*http.Request) []string { return nil }
	}
	s.auth.addFinder(sf.Tokens)
	for _, rt := range sf.Routes {
		s.mux.Handle(rt.Pattern, s.route(&sf, rt, false))
		method, path, ok := strings.Cut(rt.Pattern, " ")
		if !ok {
			method, path = "", rt.Pattern
		}
		if method != "" {
			s.methods[path] = append(s.methods[path], method)
		}
		if rt.Host {
			s.host[path] = true
		}
		if rt.Private {
			s.private[path] = true
		}
	}
	s.named[sf.Name] = &sf
	s.mu.Lock()
	defer s.mu.Unlock()
	if sf.Stop != nil {
		s.stops = append(s.stops, sf.Stop)
	}
	if sf.Lived != nil && !slices.Contains(s.lived, sf.Lived) {
		s.lived = append(s.lived, sf.Lived)
		s.stops = append(s.stops, sf.Lived.Shutdown)
	}
}

// route wraps a route's handler in its surface's auth and traffic
// counting; onHost says it is for the host listener's mux.
func (s *Server) route(sf *Surface, rt Route, onHost bool) http.Handler {
	h := rt.Handler
	if rt.Count {
		h = traffic.CountHTTP(s.o.Traffic, h)
	}
	if rt.HostOnly && !onHost {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.hostApart.Load() {
				WriteError(w, http.StatusNotFound, wire.Errorf(wire.CodeNotFound, "no route %s here: the host's routes are served on the agent's host listener (--host-listen)", r.URL.Path))
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	if rt.Access == Public || sf.Open {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := s.auth.Check(r, sf.Tokens)
		if err != nil && rt.Proof != nil && errors.Is(err, ErrNoToken) {
			err = rt.Proof(r)
		}
		if err != nil {
			if sf.Refuse != nil {
				sf.Refuse(w, r, err)
			} else {
				WriteErr(w, wire.Errorf(wire.CodeUnauthenticated, "%v", err))
			}
			return
		}
		h.ServeHTTP(w, r)
	})
}

// noRoute answers what no route takes, in the agent's JSON: 405 with
// Allow for a path that takes other methods, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	if ms := s.methods[r.URL.Path]; len(ms) > 0 {
		allow := strings.Join(ms, ", ")
		w.Header().Set("Allow", allow)
		WriteError(w, http.StatusMethodNotAllowed, wire.Errorf(wire.CodeBadRequest, "%s takes %s, not %s", r.URL.Path, allow, r.Method))
		return
	}
	WriteError(w, http.StatusNotFound, wire.Errorf(wire.CodeNotFound, "no route %s", r.URL.Path))
}

// Handler is every mounted surface behind the connection limits, for
// tests that run their own listener.
func (s *Server) Handler() http.Handler { return s.limit(s.withCORS(s.mux)) }

// withCORS answers browsers' preflights and adds CORS headers on every
// route but the private ones. Preflights need no token (a browser sends
// none); the request that follows does.
func (s *Server) withCORS(h http.Handler) http.Handler {
	ch := s.o.Origins.handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.private[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		ch.ServeHTTP(w, r)
	})
}

// Serve serves every mounted surface on l until Shutdown.
func (s *Server) Serve(l net.Listener) error { return s.serve(l, s.mux) }

// ServeOnly serves the named surface alone on l (the code interpreter's
// own port), with the limits of the agent's listener: they are shared,
// as every connection costs a descriptor of the same process.
func (s *Server) ServeOnly(l net.Listener, name string) error {
	sf, ok := s.named[name]
	if !ok {
		return errors.New("surface: no surface named " + name)
	}
	mux := http.NewServeMux()
	for _, rt := range sf.Routes {
		mux.Handle(rt.Pattern, s.route(sf, rt, false))
	}
	if sf.NotFound != nil {
		mux.Handle("/", sf.NotFound)
	}
	return s.serve(l, mux)
}

// ServeHost serves the host's routes (Route.Host) alone on l, with the
// limits of the agent's listener; from then on the HostOnly routes are
// served there and nowhere else. A host listener a sandbox's programs
// cannot reach (vsock, an address only the host routes to) keeps them
// from pausing, resuming or upgrading the sandbox with the token they
// hold.
func (s *Server) ServeHost(l net.Listener) error {
	mux := http.NewServeMux()
	for _, sf := range s.named {
		for _, rt := range sf.Routes {
			if rt.Host {
				mux.Handle(rt.Pattern, s.route(sf, rt, true))
			}
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, wire.Errorf(wire.CodeNotFound, "no route %s on the host listener: it serves the host's routes alone", r.URL.Path))
	})
	s.HostApart()
	return s.serve(l, mux)
}

// HostApart serves the HostOnly routes on the host listener alone from
// now on: call it before any listener serves, ServeHost after.
func (s *Server) HostApart() { s.hostApart.Store(true) }

func (s *Server) serve(l net.Listener, h http.Handler) error {
	hs := &http.Server{
		// No ReadTimeout or WriteTimeout: surfaces stream for minutes
		// (websockets, downloads, long responses); handlers that read
		// small bodies set their own deadline.
		Handler:           s.limit(s.withCORS(h)),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       s.o.IdleTimeout,
		ConnState: func(c net.Conn, st http.ConnState) {
			s.conns.setState(c, st)
			if s.onState != nil {
				s.onState(st)
			}
		},
		ConnContext: connContext,
		ErrorLog:    httpErrorLog(s.log),
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.servers = append(s.servers, hs)
	s.mu.Unlock()
	err := hs.Serve(s.conns.listen(s.gate.wrap(l)))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting on every listener, has each surface end its
// long-lived connections (Surface.Lived, Surface.Stop), and waits for the
// requests in flight, or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	servers, stops := s.servers, s.stops
	s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, hs := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = hs.Shutdown(ctx)
		}()
	}
	for _, stop := range stops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// httpErrorLog sends net/http's own log lines (accept errors, TLS and
// handshake noise) through the agent's logger, as JSON like the rest.
func httpErrorLog(log *zap.Logger) *stdlog.Logger {
	l, err := zap.NewStdLogAt(log.Named("http"), zap.WarnLevel)
	if err != nil {
		return nil
	}
	return l
}

// Counted routes h, with the token and counting its bodies as traffic,
// under each of the patterns: an adapter whose own mux splits its paths.
func Counted(h http.Handler, patterns ...string) []Route {
	out := make([]Route, len(patterns))
	for i, p := range patterns {
		out[i] = Route{Pattern: p, Handler: h, Count: true}
	}
	return out
}
