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
	"sync"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
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
	CancelCell(streamID uint64, why string) error
}

// Options configure a Server.
type Options struct {
	Kernels Kernels // required
	// Cuts is the agent's registry of what a resume cuts; nil: one of
	// its own, at generation 0.
	Cuts   *surface.Cuts
	Logger *zap.Logger
}

const (
	// maxBody bounds a request body: code is text, a megabyte of it is
	// a program, not a cell.
	maxBody = 8 << 20
)

// Server is the API. It is an http.Handler for the paths in Patterns.
type Server struct {
	o   Options
	log *zap.Logger
	h   http.Handler

	mu       sync.Mutex
	defaults map[string]string // language (not python) -> its default context

	defMu sync.Mutex // one default context start per language at a time
}

// New builds the API.
func New(o Options) *Server {
	if o.Cuts == nil {
		o.Cuts = surface.NewCuts(nil)
	}
	s := &Server{o: o, log: o.Logger, defaults: map[string]string{}}
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
	s.h = mux
	return s
}

// Tokens is where the code interpreter's clients put the token: the SDK
// sends X-Access-Token on /execute only, and E2B-Traffic-Access-Token on
// every route when its control plane gave it one (a platform that fronts
// the agent passes the agent's token there); Authorization: Bearer too.
var Tokens = surface.AnyOf(surface.FromHeader("X-Access-Token", "E2B-Traffic-Access-Token"), surface.FromAuthorization("Bearer"))

// Surface is the API's routes, /execute and /contexts. On a listener of
// its own (E2B's SDK addresses port 49999), net/http's plain-text 404
// answers the rest, as E2B's server does.
func (s *Server) Surface() surface.Surface {
	routes := surface.Counted(s.h, "/execute", "/contexts", "/contexts/")
	return surface.Surface{Name: "codeinterp", Tokens: Tokens, Routes: routes, NotFound: s.h, Lived: s.o.Cuts,
		Refuse: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusUnauthorized, "missing or wrong access token (send X-Access-Token, E2B-Traffic-Access-Token or Authorization: Bearer)")
		}}
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
	writeError(w, surface.Status(err), wire.AsError(err).Message)
}
