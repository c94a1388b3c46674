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
	"github.com/rayito/rayito-agent/internal/traffic"
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
		Watch(path string, recursive bool) (*stream.Stream, error)
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
		MakeDir(user, path string, parents bool) error
		MoveWith(user, from, to string, o files.MoveOptions) error
		Remove(user, path string, recursive bool) error
		Open(user, path string) (*files.File, error)
		Create(user, path string, o files.WriteOptions) (*files.Writer, error)
	}
)

// Config is what the API needs. Logger, Traffic and Generation may be
// nil; the rest are required.
type Config struct {
	Logger  *zap.Logger
	Auth    Tokens
	Streams *stream.Registry
	Procs   Execer
	PTYs    PTYs
	Watches Watches
	Users   Users
	Files   Files
	Traffic *traffic.Counter
	// Generation returns the current resume generation.
	Generation func() uint64
	// Open serves requests without a token. Unsafe: anyone who reaches
	// the port runs commands as any user. For local development only.
	Open bool
}

// maxMessage bounds one incoming message (input for a process, mostly).
const maxMessage = 16 << 20

// Server is the envd API. Build with New, put on a listener with Mount.
type Server struct {
	cfg   Config
	log   *zap.Logger
	calls calls
}

// New builds the API.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Traffic == nil {
		cfg.Traffic = traffic.NewCounter()
	}
	if cfg.Generation == nil {
		cfg.Generation = func() uint64 { return 0 }
	}
	return &Server{cfg: cfg, log: cfg.Logger}
}

// Mounter is where the API's routes go: endpoint.Server.Mount.
type Mounter interface {
	Mount(pattern string, h http.Handler)
}

// Mount serves the API's routes on m.
func (s *Server) Mount(m Mounter) {
	for pattern, h := range s.Routes() {
		m.Mount(pattern, h)
	}
}

// Routes returns the API's handlers by net/http ServeMux pattern. The two
// services' connect handlers are built at their first request
// (lazyHandler).
func (s *Server) Routes() map[string]http.Handler {
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
	return map[string]http.Handler{
		"/" + processconnect.ProcessName + "/":       s.guard(proc, false),
		"/" + filesystemconnect.FilesystemName + "/": s.guard(fs, false),
		"/files": s.guard(http.HandlerFunc(s.handleFiles), true),
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

// guard checks auth, counts traffic, and registers the request so that a
// resume can cut it.
func (s *Server) guard(h http.Handler, files bool) http.Handler {
	return traffic.CountHTTP(s.cfg.Traffic, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.authorize(r, files); err != nil {
			if files {
				writeFilesError(w, http.StatusUnauthorized, err.Error())
			} else {
				writeUnauthenticated(w, err)
			}
			return
		}
		c := &call{rc: http.NewResponseController(w), done: make(chan struct{})}
		s.calls.add(c, s.cfg.Generation)
		defer func() {
			s.calls.remove(c)
			if c.cutBy() != 0 {
				// The connection may carry the client's next request.
				c.rc.SetWriteDeadline(time.Time{})
				c.rc.SetReadDeadline(time.Time{})
			}
			close(c.done)
		}()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, c)))
	}))
}

// writeUnauthenticated answers a request refused before any handler with
// HTTP 401 and a Connect error body: unary clients read the body, stream
// clients the status, and both get unauthenticated.
func writeUnauthenticated(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	json.NewEncoder(w).Encode(map[string]string{"code": connect.CodeUnauthenticated.String(), "message": err.Error()})
}

// cutBound bounds a cut when the resume sequence gives no deadline.
const cutBound = 2 * time.Second

// CutForResume ends every stream of this API opened before generation gen
// with the Connect error unavailable, after the output written before the
// cut, and returns when their handlers have returned or ctx ends. A
// stream's writes to a connection that stopped reading fail at ctx's
// deadline. Unary calls and file transfers are not cut.
func (s *Server) CutForResume(ctx context.Context, gen uint64) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(cutBound)
	}
	var streams []*call
	for _, c := range s.calls.before(gen) {
		if c.cut(gen, deadline) {
			streams = append(streams, c)
		}
	}
	for _, c := range streams {
		select {
		case <-c.done:
		case <-ctx.Done():
			s.log.Warn("envd streams still ending after the resume cut's bound", zap.Uint64("generation", gen))
			return
		}
	}
	s.log.Debug("cut envd streams for resume", zap.Int("streams", len(streams)), zap.Uint64("generation", gen))
}

// resumeError is how a stream cut by a resume ends.
func resumeError(gen uint64, what string) error {
	return errorf(connect.CodeUnavailable, "the sandbox was resumed from a snapshot (resume generation %d), which ends every open stream: %s", gen, what)
}
