package hostapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Pauser quiesces the sandbox before a pause; resume.Manager implements it.
type Pauser interface {
	Pause(ctx context.Context, req resume.PauseRequest) (resume.PauseAnswer, error)
	Abort() (resume.AbortAnswer, error)
}

// pauseRequest reads /v1/pause's body: every field optional, each
// checked against its bounds, and a clear error naming the field.
func pauseRequest(body pauseBody) (resume.PauseRequest, *wire.Error) {
	req := resume.PauseRequest{Mode: resume.ModeMemory, Shrink: resume.ShrinkNone,
		Deadline: resume.DefaultPauseDeadline, ThawAfter: resume.DefaultThawAfter}
	switch m := resume.PauseMode(body.Mode); m {
	case "":
	case resume.ModeMemory, resume.ModeFilesystem:
		req.Mode = m
	default:
		return req, wire.Errorf(wire.CodeBadRequest, "mode must be memory or filesystem, got %q", body.Mode)
	}
	switch s := resume.Shrink(body.Shrink); s {
	case "":
	case resume.ShrinkNone, resume.ShrinkCache, resume.ShrinkAll:
		req.Shrink = s
	default:
		return req, wire.Errorf(wire.CodeBadRequest, "shrink must be none, cache or all, got %q", body.Shrink)
	}
	if body.DeadlineMs != nil {
		d := *body.DeadlineMs
		if d < 1 || d > resume.MaxPauseDeadline.Milliseconds() {
			return req, wire.Errorf(wire.CodeBadRequest, "deadline_ms must be 1 to %d, got %d", resume.MaxPauseDeadline.Milliseconds(), d)
		}
		req.Deadline = time.Duration(d) * time.Millisecond
	}
	if body.ThawAfterMs != nil {
		d := *body.ThawAfterMs
		if d < resume.MinThawAfter.Milliseconds() || d > resume.MaxThawAfter.Milliseconds() {
			return req, wire.Errorf(wire.CodeBadRequest, "thaw_after_ms must be %d to %d, got %d", resume.MinThawAfter.Milliseconds(), resume.MaxThawAfter.Milliseconds(), d)
		}
		req.ThawAfter = time.Duration(d) * time.Millisecond
	}
	return req, nil
}

type pauseBody struct {
	Mode        string `json:"mode"`
	Shrink      string `json:"shrink"`
	DeadlineMs  *int64 `json:"deadline_ms"`
	ThawAfterMs *int64 `json:"thaw_after_ms"`
}

func (s *API) handlePause(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Pause == nil {
		surface.WriteErr(w, wire.Errorf(wire.CodeUnsupported, "pause is not available in this agent"))
		return
	}
	var body pauseBody
	if e := decodeBody(w, r, &body); e != nil {
		surface.WriteErr(w, e)
		return
	}
	req, e := pauseRequest(body)
	if e != nil {
		surface.WriteErr(w, e)
		return
	}
	a, err := s.cfg.Pause.Pause(r.Context(), req)
	if errors.Is(err, resume.ErrPauseConflict) {
		surface.WriteErr(w, wire.Errorf(wire.CodeConflict, "%v", err))
		return
	}
	if err != nil {
		surface.WriteErr(w, wire.Errorf(wire.CodeInternal, "%v", err))
		return
	}
	surface.WriteJSON(w, http.StatusOK, a)
}

func (s *API) handlePauseAbort(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Pause == nil {
		surface.WriteErr(w, wire.Errorf(wire.CodeUnsupported, "pause is not available in this agent"))
		return
	}
	var body struct{}
	if e := decodeBody(w, r, &body); e != nil {
		surface.WriteErr(w, e)
		return
	}
	a, err := s.cfg.Pause.Abort()
	if errors.Is(err, resume.ErrNotPaused) {
		surface.WriteErr(w, wire.Errorf(wire.CodeConflict, "no pause to abort: the sandbox is running"))
		return
	}
	if err != nil {
		surface.WriteErr(w, wire.Errorf(wire.CodeInternal, "%v", err))
		return
	}
	surface.WriteJSON(w, http.StatusOK, a)
}
