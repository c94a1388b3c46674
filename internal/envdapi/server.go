package envdapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem/filesystemconnect"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process/processconnect"
	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/watch"
)

// The managers the API runs on, as the small interfaces it needs.
type (
	// Execer starts commands; proc.Manager implements it.
	Execer interface {
		Exec(o proc.ExecOptions) (*stream.Stream, error)
	}
	// PTYs starts terminals; ptymux.Manager implements it.
	PTYs interface {
		Start(o ptymux.Options) (*stream.Stream, error)
	}
	// Watches watches directories; watch.Manager implements it.
	Watches interface {
		WatchWith(path string, o watch.Options) (*stream.Stream, error)
		Unwatch(id uint64) error
	}
	// Users says who a request runs as and where their home is;
	// proc.Defaults implements it.
	Users interface {
		User(name string) (user, home string, err error)
	}
	// Files runs file operations as users; files.Manager implements it.
	Files interface {
		StatWith(user, path string, o files.InfoOptions) (files.Info, error)
		ListWith(user, path string, depth int, o files.InfoOptions) ([]files.Info, error)
		MakeDirFor(user, path string, parents bool, owner *files.User) error
		User(name string) (files.User, error)
		Agent() string
		Privileged(u files.User) bool
		MoveWith(user, from, to string, o files.MoveOptions) error
		Remove(user, path string, recursive bool) error
		Open(client, user, path string) (*files.File, error)
		Stage(user string, o files.WriteOptions) *files.Staged
	}
)

// Config is what the API needs. Logger and Cuts may be nil; the rest are
// required.
type Config struct {
	Logger  *zap.Logger
	Auth    *surface.Auth
	Streams *stream.Registry
	Procs   Execer
	PTYs    PTYs
	Watches Watches
	Users   Users
	Files   Files
	// Cuts is the agent's registry of what a resume cuts; nil: one of
	// its own, at generation 0.
	Cuts *surface.Cuts
	// Open serves requests without a token. Unsafe: anyone who reaches
	// the port runs commands as any user. For local development only.
	Open bool
}

// maxMessage bounds one incoming message (input for a process, mostly).
const maxMessage = 16 << 20

// Server is the envd API. Build with New, mount its Surface.
type Server struct {
	cfg Config
	log *zap.Logger
}

// New builds the API.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Cuts == nil {
		cfg.Cuts = surface.NewCuts(nil)
	}
	return &Server{cfg: cfg, log: cfg.Logger}
}

// Surface is the API's routes: the two Connect services and /files,
// with the token in X-Access-Token (or, on /files, a signed URL). The
// two services' connect handlers are built at their first request
// (lazyHandler).
func (s *Server) Surface() surface.Surface {
	opts := func() []connect.HandlerOption {
		opts := []connect.HandlerOption{
			connect.WithReadMaxBytes(maxMessage),
			connect.WithCompressMinBytes(1 << 10),
		}
		for _, c := range jsonCodecs {
			opts = append(opts, connect.WithCodec(c))
		}
		return opts
	}
	proc := &lazyHandler{build: func() http.Handler {
		_, h := processconnect.NewProcessHandler(&processService{s: s}, opts()...)
		return h
	}}
	fs := &lazyHandler{build: func() http.Handler {
		_, h := filesystemconnect.NewFilesystemHandler(&filesystemService{s: s}, opts()...)
		return h
	}}
	route := func(pattern string, h http.Handler) surface.Route {
		return surface.Route{Pattern: pattern, Handler: s.track(h), Count: true}
	}
	files := route("/files", http.HandlerFunc(s.handleFiles))
	files.Proof = s.signedURL
	return surface.Surface{
		Name:   "envd",
		Tokens: Tokens,
		Refuse: refuse,
		Open:   s.cfg.Open,
		Lived:  s.cfg.Cuts,
		Routes: []surface.Route{
			route("/"+processconnect.ProcessName+"/", proc),
			route("/"+filesystemconnect.FilesystemName+"/", fs),
			files,
		},
	}
}

// lazyHandler builds its handler at its first request. Building a
// service's connect handlers touches a good deal of code and allocates
// for each method; an agent that no envd client talks to (a sandbox
// snapshotted idle, to be resumed later) then never pays for it: built at
// start, the two took about a quarter MiB of an idle agent's 12 MiB resident
// (docs/benchmarks.md, Idle footprint).
type lazyHandler struct {
	once  sync.Once
	build func() http.Handler
	h     http.Handler
}

func (l *lazyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.once.Do(func() { l.h = l.build() })
	l.h.ServeHTTP(w, r)
}

// track registers each request with the resume cut: a handler that holds
// a stream says in its call (onCut) what ending it takes.
func (s *Server) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{rc: http.NewResponseController(w), done: make(chan struct{})}
		_, untrack, err := s.cfg.Cuts.Track(c)
		if err != nil {
			untrack = func() {} // shutting down: nothing will cut it
		}
		defer func() {
			untrack()
			if c.cutBy() != 0 {
				// The connection may carry the client's next request.
				c.rc.SetWriteDeadline(time.Time{})
				c.rc.SetReadDeadline(time.Time{})
			}
			close(c.done)
		}()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, c)))
	})
}

// writeUnauthenticated answers a request refused before any handler with
// HTTP 401 and a Connect error body: unary clients read the body, stream
// clients the status, and both get unauthenticated.
func writeUnauthenticated(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	json.NewEncoder(w).Encode(map[string]string{"code": connect.CodeUnauthenticated.String(), "message": err.Error()})
}

// resumeError is how a stream cut by a resume ends.
func resumeError(gen uint64, what string) error {
	return errorf(connect.CodeUnavailable, "the sandbox was resumed from a snapshot (resume generation %d), which ends every open stream: %s", gen, what)
}
