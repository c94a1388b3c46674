package endpoint

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Resumer runs resume sequences; resume.Manager implements it.
type Resumer interface {
	State() resume.State
	Generation() uint64
	Resume(ctx context.Context, r resume.Report) resume.State
}

// maxHostBody bounds the bodies of host calls.
const maxHostBody = 1 << 20

// decodeBody reads a JSON body strictly; an empty body is an empty object.
func decodeBody(r *http.Request, v any) *wire.Error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxHostBody+1))
	if err != nil {
		return wire.Errorf(wire.CodeBadRequest, "reading body: %v", err)
	}
	if len(b) > maxHostBody {
		return wire.Errorf(wire.CodeLimit, "body larger than %d bytes", maxHostBody)
	}
	if len(b) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytesReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return wire.Errorf(wire.CodeBadRequest, "malformed body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return wire.Errorf(wire.CodeBadRequest, "malformed body: data after the JSON object")
	}
	return nil
}

func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Resume == nil {
		writeError(w, http.StatusNotImplemented, wire.Errorf(wire.CodeUnsupported, "resume is not available in this agent"))
		return
	}
	var body struct {
		ResumeID   string `json:"resume_id"`
		TimeUnixNs *int64 `json:"time_unix_ns"`
	}
	if e := decodeBody(r, &body); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	if len(body.ResumeID) > 256 {
		writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "resume_id longer than 256 bytes"))
		return
	}
	rep := resume.Report{Source: resume.SourceHost, ResumeID: body.ResumeID}
	if body.TimeUnixNs != nil {
		if *body.TimeUnixNs <= 0 {
			writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "time_unix_ns must be positive"))
			return
		}
		rep.TimeUnixNs = *body.TimeUnixNs
	}
	st := s.cfg.Resume.Resume(r.Context(), rep)
	h := s.health()
	h.State = st
	writeJSON(w, http.StatusOK, h)
}

// CutForResume ends every attachment of every session opened before
// generation gen with reason resume, then closes those sessions with 4000.
// It returns when each has handed its close frame to the connection, or
// when ctx ends (the rest are then dropped without a close frame).
func (s *Server) CutForResume(ctx context.Context, gen uint64) {
	var wg sync.WaitGroup
	var old []*Session
	for _, ss := range s.Sessions() {
		if ss.generation < gen {
			old = append(old, ss)
		}
	}
	for _, ss := range old {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss.resumeCut(ctx)
		}()
	}
	wg.Wait()
	s.log.Debug("cut sessions for resume", zap.Int("sessions", len(old)), zap.Uint64("generation", gen))
}

// resumeCut sends `end` reason resume on every attachment, after the data
// already queued, then closes the connection with 4000 "resumed".
func (ss *Session) resumeCut(ctx context.Context) {
	if !ss.setClose(closeResumed, "resumed") {
		return
	}
	ss.mu.Lock()
	ss.cutting = true
	ss.mu.Unlock()
	ss.cut(stream.End{Reason: stream.ReasonResume})
	pumpsDone := make(chan struct{})
	go func() { ss.pumps.Wait(); close(pumpsDone) }()
	select {
	case <-pumpsDone:
	case <-ctx.Done():
		ss.conn.CloseNow()
		return
	}
	written := make(chan struct{})
	select {
	case ss.data <- outFrame{close: true, release: func() { close(written) }}:
	case <-ss.ctx.Done():
		return
	case <-ctx.Done():
		ss.conn.CloseNow()
		return
	}
	select {
	case <-written:
	case <-ss.ctx.Done():
	case <-ctx.Done():
		ss.conn.CloseNow()
	}
}

func (s *Server) handleInit(w http.ResponseWriter, r *http.Request) {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	// The first call may set the token when none is configured; after
	// that every call needs it.
	if s.cfg.Auth.IsSet() && !s.cfg.Auth.Check(r) {
		writeError(w, http.StatusUnauthorized, wire.Errorf(wire.CodeBadRequest, "missing or wrong access token"))
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
	}
	if e := decodeBody(r, &body); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	// Validate everything before changing anything.
	if body.AccessToken != nil && *body.AccessToken == "" {
		writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "access_token must not be empty"))
		return
	}
	if body.TimeUnixNs != nil && *body.TimeUnixNs <= 0 {
		writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "time_unix_ns must be positive"))
		return
	}
	var idle *int64
	if body.IdlePolicy != nil && body.IdlePolicy.MaxIdleSeconds != nil {
		idle = body.IdlePolicy.MaxIdleSeconds
		if *idle < 60 {
			writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "idle_policy.max_idle_seconds must be at least 60, got %d", *idle))
			return
		}
	}
	for k, v := range body.Env {
		if k == "" || containsAny(k, "=\x00") {
			writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "invalid environment variable name %q", k))
			return
		}
		// No process can be given a NUL: every later exec would fail.
		if containsAny(v, "\x00") {
			writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "environment variable %q: value holds a NUL byte", k))
			return
		}
	}
	if body.DefaultCwd != "" && !isDir(body.DefaultCwd) {
		writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "default_cwd %q is not a directory", body.DefaultCwd))
		return
	}
	if body.DefaultUser != "" && s.cfg.Defaults != nil {
		if _, err := s.cfg.Defaults.Resolve(procSpecFor(body.DefaultUser)); err != nil {
			writeError(w, http.StatusBadRequest, wire.AsError(err))
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
	writeJSON(w, http.StatusOK, s.health())
}
