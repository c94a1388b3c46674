// Package endpoint serves the agent's native protocol: the websocket that
// multiplexes every stream, and the /v1/files transfer routes. It is one
// surface on the shared layer (package surface), which does the
// listening, the limits, the auth and the resume cut's bookkeeping.
//
// Each websocket connection is a Session with one reader goroutine (frames
// in, dispatched to ops), one pump goroutine per attachment that pulls its
// stream's log within the attachment's window, and a writer goroutine. An
// answer or event is written by the goroutine that has it when the
// connection is free, else queued; the writer writes what was queued,
// control frames ahead of bulk data. Producers never see a connection, so
// one slow client cannot slow anything else.
package endpoint

import (
	"net/http"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Config is what the native protocol needs. Capability fields left nil
// make their ops answer `unsupported`.
type Config struct {
	Logger  *zap.Logger
	Version string
	Streams *stream.Registry
	Traffic *traffic.Counter
	Procs   Execer
	PTYs    PTYs
	Watches Watches
	Kernels Kernels
	Files   *files.Manager
	// Cuts is the agent's registry of what a resume cuts, which also
	// says the generation a session opened under; nil: one of its own,
	// at generation 0.
	Cuts *surface.Cuts
	// Origins are the pages whose websockets are accepted (the agent's
	// --allowed-origins); the zero value is any.
	Origins surface.Origins
}

// Server is the native protocol. Build with New, mount its Surface.
type Server struct {
	cfg Config
	log *zap.Logger
	ops map[string]op
	// outcomes are the answers of requests named by an op_id.
	outcomes *outcomes

	// suspending: a pause is in place (suspend.go); hellos say so.
	suspending atomic.Bool
}

// New builds the native protocol over the managers in cfg.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Traffic == nil {
		cfg.Traffic = traffic.NewCounter()
	}
	if cfg.Cuts == nil {
		cfg.Cuts = surface.NewCuts(nil)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, outcomes: newOutcomes(streamAlive(cfg.Streams))}
	s.ops = s.buildOps()
	return s
}

// Surface is the native protocol's routes: the websocket and the file
// transfer routes.
func (s *Server) Surface() surface.Surface {
	files := func(h http.HandlerFunc) surface.Route {
		return surface.Route{Handler: h, Count: true}
	}
	routes := []surface.Route{{Pattern: "GET /v1/connect", Handler: http.HandlerFunc(s.handleConnect)}}
	for _, rt := range []struct {
		method string
		h      http.HandlerFunc
	}{{"GET", s.handleFileGet}, {"HEAD", s.handleFileGet}, {"PUT", s.handleFilePut}, {"POST", s.handleFilePost}} {
		r := files(rt.h)
		r.Pattern = rt.method + " /v1/files"
		routes = append(routes, r)
	}
	return surface.Surface{Name: "native", Tokens: surface.AgentTokens, Routes: routes, Lived: s.cfg.Cuts}
}

// Sessions returns the open websocket sessions (the registry of
// long-lived connections holds them, with other surfaces' connections
// when they share it).
func (s *Server) Sessions() []*Session {
	var out []*Session
	s.cfg.Cuts.Each(func(c surface.Cuttable) {
		if ss, ok := c.(*Session); ok && ss.srv == s {
			out = append(out, ss)
		}
	})
	return out
}

// instance is this run's id, which stream ids carry too.
func (s *Server) instance() string {
	if s.cfg.Streams == nil {
		return ""
	}
	return s.cfg.Streams.Instance()
}

func writeError(w http.ResponseWriter, status int, e *wire.Error) { surface.WriteError(w, status, e) }

func writeJSON(w http.ResponseWriter, status int, v any) { surface.WriteJSON(w, status, v) }
