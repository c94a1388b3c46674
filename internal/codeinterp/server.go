// Package codeinterp serves E2B's code-interpreter API (POST /execute with
// NDJSON output, and /contexts), the API of @e2b/code-interpreter's
// runCode, over the agent's own kernels.
//
// It translates and holds no kernel logic: a context is a kernel of the
// jupyter.Manager, the default python context is the agent's default
// kernel (the one the native protocol's execute uses without a kernel),
// and a cell's output is read from its cell stream, which stays readable
// through the native protocol. Its only state is which kernel is the
// default context of each language other than python.
package codeinterp

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Kernels is what the API needs of the kernel manager; *jupyter.Manager
// implements it.
type Kernels interface {
	Specs() []jupyter.Spec
	Start(ctx context.Context, o jupyter.StartOptions) (*jupyter.Kernel, error)
	Get(id string) (*jupyter.Kernel, error)
	List() []jupyter.KernelInfo
	ExecuteWith(ctx context.Context, kernelID, code string, o jupyter.ExecuteOptions) (*stream.Stream, string, error)
	Restart(ctx context.Context, id string) error
	Shutdown(ctx context.Context, id string) error
}

// Authenticator checks the agent's one token; endpoint.Auth implements it.
type Authenticator interface {
	Valid(token string) bool
}

// Options configure a Server.
type Options struct {
	Kernels Kernels       // required
	Auth    Authenticator // required
	Traffic *traffic.Counter
	Logger  *zap.Logger
}

const (
	// maxBody bounds a request body: code is text, a megabyte of it is
	// a program, not a cell.
	maxBody = 8 << 20
	// opBound bounds a kernel start or restart made for a request.
	opBound = 2 * time.Minute
)

// Server is the API. It is an http.Handler for the paths in Patterns.
type Server struct {
	o   Options
	log *zap.Logger
	h   http.Handler

	mu       sync.Mutex
	running  map[*execution]struct{}
	defaults map[string]string // language (not python) -> its default context

	defMu sync.Mutex // one default context start per language at a time
}

// New builds the API.
func New(o Options) *Server {
	s := &Server{o: o, log: o.Logger, running: map[*execution]struct{}{}, defaults: map[string]string{}}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.Named("codeinterp")
	// net/http answers unknown paths (404) and wrong methods (405, with
	// Allow) in plain text, as E2B's server does.
	mux := http.NewServeMux()
	mux.HandleFunc("POST /execute", s.execute)
	mux.HandleFunc("GET /contexts", s.listContexts)
	mux.HandleFunc("POST /contexts", s.createContext)
	mux.HandleFunc("DELETE /contexts/{id}", s.removeContext)
	mux.HandleFunc("POST /contexts/{id}/restart", s.restartContext)
	var h http.Handler = mux
	if o.Traffic != nil {
		h = traffic.CountHTTP(o.Traffic, h)
	}
	s.h = h
	return s
}

// Patterns are the net/http patterns to mount the API under.
func (s *Server) Patterns() []string { return []string{"/execute", "/contexts", "/contexts/"} }

// ServeHTTP checks the token and serves the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		writeError(w, http.StatusUnauthorized, "missing or wrong access token (send X-Access-Token, E2B-Traffic-Access-Token or Authorization: Bearer)")
		return
	}
	s.h.ServeHTTP(w, r)
}

// authorized accepts the token in any header a client of this API sends
// it in: the SDK sends X-Access-Token on /execute only, and
// E2B-Traffic-Access-Token on every route when its control plane gave it
// one (a platform that fronts the agent passes the agent's token there).
func (s *Server) authorized(r *http.Request) bool {
	for _, name := range []string{"X-Access-Token", "E2B-Traffic-Access-Token"} {
		if v := r.Header.Get(name); v != "" && s.o.Auth.Valid(v) {
			return true
		}
	}
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "Bearer") && s.o.Auth.Valid(strings.TrimSpace(tok))
}

// writeError answers in plain text, as E2B's server does: the SDK shows
// the body of a 404 as the error's message.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write([]byte(msg + "\n"))
}

// writeErr answers a manager's error with the status of its code.
func writeErr(w http.ResponseWriter, err error) {
	we := wire.AsError(err)
	writeError(w, wire.HTTPStatus(we.Code), we.Message)
}
