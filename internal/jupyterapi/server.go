// Package jupyterapi serves jupyter_server's kernelspec, kernel and session
// REST API and its kernel websockets (both framings) over the agent's own
// kernels, so that JupyterLab, VS Code and @jupyterlab/services work with
// no Jupyter server in the sandbox.
//
// It translates and holds no kernel logic: kernels, restarts, interrupts
// and the raw message relay are the jupyter.Manager's, the same kernels
// the native protocol drives. The only state of its own is the session
// table (notebook path to kernel), as jupyter_server keeps it.
//
// A kernel websocket is a relay of the kernel's raw channels: its
// execute_request goes to the kernel's shell socket as the client sent
// it, beside (not through) the cell queue the native protocol and the
// code interpreter use, as a second Jupyter client of one kernel would;
// the kernel itself runs requests in the order they reach it. A session's
// new websocket replaces its stale one and takes over its relay; a resume
// closes every websocket with 1012 and clients reconnect.
package jupyterapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
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
	Interrupt(id string) error
	Restart(ctx context.Context, id string) error
	Shutdown(ctx context.Context, id string) error
	Channels(id string) (*stream.Stream, error)
}

// Options configure a Server.
type Options struct {
	Kernels Kernels // required
	// Traffic counts the kernel websockets' messages; nil counts nothing.
	Traffic *traffic.Counter
	// Cuts is the agent's registry of what a resume cuts; nil: one of
	// its own, at generation 0.
	Cuts   *surface.Cuts
	Logger *zap.Logger
	// LegacyOnly makes kernel websockets never select the v1 subprotocol,
	// like jupyter_server with kernel_ws_protocol set to '': clients fall
	// back to the legacy JSON framing.
	LegacyOnly bool
	// Origins are the pages whose kernel websockets are accepted (the
	// agent's --allowed-origins); the zero value is any.
	Origins surface.Origins
}

const (
	// version is what GET /api reports: the jupyter_server API this one
	// follows.
	version = "1.23.3"
	// maxBody bounds a REST request body; the API's bodies are tiny.
	maxBody = 1 << 20
	// closeWait bounds closing the websockets when the agent stops.
	closeWait = 5 * time.Second
)

// Server is the API. It is an http.Handler for the paths in Patterns.
type Server struct {
	o        Options
	log      *zap.Logger
	h        http.Handler
	sessions sessionTable

	mu      sync.Mutex
	parked  map[string]*parked      // relays waiting for their session's next websocket
	open    map[string]*channelConn // the open websocket of each session (park.go)
	closing bool                    // the agent is stopping: park no more
}

// New builds the API.
func New(o Options) *Server {
	if o.Cuts == nil {
		o.Cuts = surface.NewCuts(nil)
	}
	s := &Server{o: o, log: o.Logger, parked: map[string]*parked{}, open: map[string]*channelConn{}}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.Named("jupyterapi")
	mux := http.NewServeMux()
	for path, ms := range map[string]methods{
		"/api":                        {"GET": s.getVersion},
		"/api/kernelspecs":            {"GET": s.listSpecs},
		"/api/kernelspecs/{name}":     {"GET": s.getSpec},
		"/kernelspecs/{name}/{file}":  {"GET": s.getSpecResource},
		"/api/kernels":                {"GET": s.listKernels, "POST": s.startKernel},
		"/api/kernels/{id}":           {"GET": s.getKernel, "DELETE": s.shutdownKernel},
		"/api/kernels/{id}/interrupt": {"POST": s.interruptKernel},
		"/api/kernels/{id}/restart":   {"POST": s.restartKernel},
		"/api/kernels/{id}/channels":  {"GET": s.serveChannels},
		"/api/sessions":               {"GET": s.listSessions, "POST": s.createSession},
		"/api/sessions/{id}":          {"GET": s.getSession, "PATCH": s.updateSession, "DELETE": s.deleteSession},
	} {
		mux.Handle(path, ms)
	}
	mux.HandleFunc("/", s.noRoute)
	s.h = mux
	return s
}

// Tokens is where Jupyter clients put the token: an Authorization header
// of scheme token (or Bearer), or a token query parameter (websockets
// from browsers and Node cannot set headers).
var Tokens = surface.FirstOf(surface.FromAuthorization("token", "Bearer"), surface.FromQuery("token"))

// Surface is the API's routes, under /api and /kernelspecs.
func (s *Server) Surface() surface.Surface {
	routes := surface.Counted(s.h, "/api", "/api/", "/kernelspecs/")
	return surface.Surface{Name: "jupyter", Tokens: Tokens, Routes: routes, Lived: s.o.Cuts, Stop: s.stop,
		Refuse: func(w http.ResponseWriter, r *http.Request, err error) {
			// jupyter_server answers API requests without a valid token so.
			writeError(w, http.StatusForbidden, "Forbidden: missing or wrong token (send Authorization: token <T>, or ?token=<T>)")
		}}
}

// methods routes one path by method and answers the others with 405.
type methods map[string]http.HandlerFunc

func (ms methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := ms[r.Method]; ok {
		h(w, r)
		return
	}
	allow := make([]string, 0, len(ms))
	for m := range ms {
		allow = append(allow, m)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
}

// notServed names the jupyter_server services the agent does not offer.
var notServed = []string{"contents", "terminals", "nbconvert", "config", "me", "events", "status"}

func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	for _, name := range notServed {
		if p := "/api/" + name; r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/") {
			writeError(w, http.StatusNotFound, "rayito-agent does not serve jupyter_server's "+name+" API; only kernelspecs, kernels and sessions")
			return
		}
	}
	writeError(w, http.StatusNotFound, "no route "+r.URL.Path)
}

func (s *Server) getVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": version})
}

// apiError is jupyter_server's error body.
type apiError struct {
	Message string  `json:"message"`
	Reason  *string `json:"reason"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Message: msg})
}

// writeErr answers a manager's error with the status of its code.
func writeErr(w http.ResponseWriter, err error) {
	writeError(w, surface.Status(err), wire.AsError(err).Message)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// readJSON decodes a request body into dst; an empty body leaves dst as
// it is. Clients label their JSON text/plain, so the type is not checked.
func readJSON(w http.ResponseWriter, r *http.Request, dst any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body larger than 1 MiB")
		} else {
			writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		}
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return true
	}
	if err := json.Unmarshal(body, dst); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid JSON in body of request: "+err.Error())
		return false
	}
	return true
}
