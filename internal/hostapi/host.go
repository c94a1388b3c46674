package hostapi

import (
	"context"
	"io"
	"mime"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/netconf"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Resumer runs resume sequences; resume.Manager implements it.
type Resumer interface {
	State() resume.State
	Generation() uint64
	Resume(ctx context.Context, r resume.Report) resume.State
	Init(entropy []byte, sandboxID string) (reseeded, newSandbox bool)
}

// cloneFields reads the clone-safety fields of /v1/resume and /v1/init:
// entropy (never logged or echoed, not even in an error) and sandbox_id.
func cloneFields(entropy *string, sandboxID string) ([]byte, *wire.Error) {
	var b []byte
	if entropy != nil {
		var err error
		if b, err = resume.DecodeEntropy(*entropy); err != nil {
			return nil, wire.Errorf(wire.CodeBadRequest, "%v", err)
		}
	}
	if err := resume.CheckSandboxID(sandboxID); err != nil {
		clear(b)
		return nil, wire.Errorf(wire.CodeBadRequest, "%v", err)
	}
	return b, nil
}

// Bounds of the bodies of host calls: they are small, so a peer that
// sends one slowly is cut off rather than waited for.
const (
	maxHostBody = 1 << 20
	// BodyTimeout bounds reading a host call's body.
	BodyTimeout = 10 * time.Second
)

// fromHost refuses what a web page could send: a host never sends an
// Origin header, and sends its body as application/json. A page cannot
// set that content type on a request without a preflight, which these
// routes never answer, so even the token-less first /v1/init cannot be
// won by a cross-site form post from a page a browser in the guest
// visits (text/plain and form bodies are simple requests: no preflight).
func fromHost(r *http.Request) *wire.Error {
	if r.Header.Get("Origin") != "" {
		return wire.Errorf(wire.CodeBadRequest, "%s is for the host, which sends no Origin header: refused from a web page", r.URL.Path)
	}
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		return nil // no body: nothing a form could carry
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return wire.Errorf(wire.CodeBadRequest, "%s takes Content-Type: application/json, got %q", r.URL.Path, r.Header.Get("Content-Type"))
	}
	return nil
}

// decodeBody reads a JSON object strictly, within BodyTimeout; an
// empty body is an empty object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *wire.Error {
	if e := fromHost(r); e != nil {
		return e
	}
	// The server has no read timeout (other surfaces stream bodies for
	// minutes); this handler's own body gets one.
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyTimeout))
	b, err := io.ReadAll(io.LimitReader(r.Body, maxHostBody+1))
	if err != nil {
		return wire.Errorf(wire.CodeBadRequest, "reading the body: %v", err)
	}
	if len(b) > maxHostBody {
		return wire.Errorf(wire.CodeLimit, "body larger than %d bytes", maxHostBody)
	}
	return surface.DecodeObject(b, v)
}

func (s *API) handleResume(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Resume == nil {
		surface.WriteErr(w, wire.Errorf(wire.CodeUnsupported, "resume is not available in this agent"))
		return
	}
	var body struct {
		ResumeID   string  `json:"resume_id"`
		TimeUnixNs *int64  `json:"time_unix_ns"`
		Entropy    *string `json:"entropy"`
		SandboxID  string  `json:"sandbox_id"`
		Network    *struct {
			Interface string   `json:"interface"`
			Address   string   `json:"address"`
			Gateway   string   `json:"gateway"`
			DNS       []string `json:"dns"`
		} `json:"network"`
	}
	if e := decodeBody(w, r, &body); e != nil {
		surface.WriteErr(w, e)
		return
	}
	var facts netconf.Facts
	if n := body.Network; n != nil {
		// Checked whole before anything runs: a bad field applies nothing.
		var err error
		if facts, err = netconf.ParseFacts(n.Interface, n.Address, n.Gateway, n.DNS); err != nil {
			surface.WriteErr(w, wire.Errorf(wire.CodeBadRequest, "%v", err))
			return
		}
	}
	if len(body.ResumeID) > 256 {
		surface.WriteErr(w, wire.Errorf(wire.CodeBadRequest, "resume_id longer than 256 bytes"))
		return
	}
	entropy, e := cloneFields(body.Entropy, body.SandboxID)
	if e != nil {
		surface.WriteErr(w, e)
		return
	}
	defer clear(entropy)
	rep := resume.Report{Source: resume.SourceHost, ResumeID: body.ResumeID, Entropy: entropy, SandboxID: body.SandboxID, Network: facts}
	if body.TimeUnixNs != nil {
		if *body.TimeUnixNs <= 0 {
			surface.WriteErr(w, wire.Errorf(wire.CodeBadRequest, "time_unix_ns must be positive"))
			return
		}
		rep.TimeUnixNs = *body.TimeUnixNs
	}
	// The resume runs to its end on its own bounds (the kernel check, the
	// hooks', the cut's), whether or not the host waits for it: a host
	// that gives up early must not cut it short, and its retry with the
	// same resume_id gets the whole answer.
	st := s.cfg.Resume.Resume(context.WithoutCancel(r.Context()), rep)
	h := s.health()
	h.State = st
	surface.WriteJSON(w, http.StatusOK, h)
}

// initAllowed says whether r may call /v1/init: with the token, or
// without one while no token is set and no init has succeeded yet (the
// host's first call, which may set the token). Any later call without
// the token could inject environment into every process.
func (s *API) initAllowed(r *http.Request) bool {
	if s.cfg.Auth.IsSet() {
		return s.cfg.Auth.Check(r, surface.AgentTokens) == nil
	}
	return !s.initDone.Load()
}

func (s *API) handleInit(w http.ResponseWriter, r *http.Request) {
	refuse := func() {
		surface.WriteErr(w, wire.Errorf(wire.CodeUnauthenticated, "missing or wrong access token (only the first /v1/init may come without one, while the agent has none)"))
	}
	if !s.initAllowed(r) {
		refuse()
		return
	}
	var body struct {
		AccessToken *string           `json:"access_token"`
		Env         map[string]string `json:"env"`
		DefaultUser string            `json:"default_user"`
		DefaultCwd  string            `json:"default_cwd"`
		TimeUnixNs  *int64            `json:"time_unix_ns"`
		IdlePolicy  *struct {
			MaxIdleSeconds *int64 `json:"max_idle_seconds"`
		} `json:"idle_policy"`
		Entropy   *string `json:"entropy"`
		SandboxID string  `json:"sandbox_id"`
	}
	// The body is read before the lock: a caller that sends it slowly
	// holds only its own request, never the host's.
	if e := decodeBody(w, r, &body); e != nil {
		surface.WriteErr(w, e)
		return
	}
	s.initMu.Lock()
	defer s.initMu.Unlock()
	// Again under the lock: another init may have set the token or used
	// the open first call meanwhile.
	if !s.initAllowed(r) {
		refuse()
		return
	}
	// Validate everything before changing anything.
	if body.AccessToken != nil && *body.AccessToken == "" {
		surface.WriteErr(w, wire.Errorf(wire.CodeBadRequest, "access_token must not be empty"))
		return
	}
	if body.TimeUnixNs != nil && *body.TimeUnixNs <= 0 {
		surface.WriteErr(w, wire.Errorf(wire.CodeBadRequest, "time_unix_ns must be positive"))
		return
	}
	entropy, e := cloneFields(body.Entropy, body.SandboxID)
	if e != nil {
		surface.WriteErr(w, e)
		return
	}
	defer clear(entropy)
	var idle *int64
	if body.IdlePolicy != nil && body.IdlePolicy.MaxIdleSeconds != nil {
		idle = body.IdlePolicy.MaxIdleSeconds
		if *idle < traffic.MinIdleSeconds || *idle > traffic.MaxIdleSeconds {
			surface.WriteErr(w, wire.Errorf(wire.CodeBadRequest, "idle_policy.max_idle_seconds must be from %d to %d (30 days), got %d", traffic.MinIdleSeconds, traffic.MaxIdleSeconds, *idle))
			return
		}
	}
	if err := proc.CheckDefaultEnv(body.Env); err != nil {
		surface.WriteErr(w, wire.AsError(err))
		return
	}
	if body.DefaultCwd != "" && !isDir(body.DefaultCwd) {
		surface.WriteErr(w, wire.Errorf(wire.CodeBadRequest, "default_cwd %q is not a directory", body.DefaultCwd))
		return
	}
	if body.DefaultUser != "" && s.cfg.Defaults != nil {
		// A spec that only checks that the user can run a program.
		if _, err := s.cfg.Defaults.Resolve(proc.Spec{Argv: []string{"/bin/sh"}, User: body.DefaultUser}); err != nil {
			surface.WriteErr(w, wire.AsError(err))
			return
		}
	}
	if s.cfg.Defaults != nil {
		s.cfg.Defaults.Set(body.DefaultUser, body.DefaultCwd, body.Env)
	}
	if idle != nil {
		s.cfg.Traffic.SetMaxIdle(*idle)
	}
	if body.TimeUnixNs != nil && s.cfg.SetClock != nil {
		if err := s.cfg.SetClock(time.Unix(0, *body.TimeUnixNs)); err != nil {
			s.log.Warn("init: cannot set the clock", zap.Error(err))
		}
	}
	if body.AccessToken != nil {
		s.cfg.Auth.Set(*body.AccessToken)
	}
	if s.cfg.Resume != nil && (entropy != nil || body.SandboxID != "") {
		s.cfg.Resume.Init(entropy, body.SandboxID)
	}
	s.initDone.Store(true)
	surface.WriteJSON(w, http.StatusOK, s.health())
}
