package codeinterp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
)

// keepaliveEvery is the silence after which /execute sends a keepalive
// line, as E2B's server does, so that proxies keep a quiet cell's
// response open. A variable only so that tests can shorten it.
var keepaliveEvery = 5 * time.Second

// execution is one /execute response being written.
type execution struct {
	att    *stream.Attachment
	kernel string
	stream uint64
	cut    atomic.Bool // a resume cut the response
}

// goneSettle is how long a cell whose client went away waits before it
// is cancelled. A resume can reach the agent's sockets (the host side of
// the connection closed while the VM was paused) a moment before the
// agent has noticed the resume itself; a cell must then keep running, as
// every cell cut by a resume does, so the cancel waits for the resume's
// generation to show.
const goneSettle = time.Second

type executeRequest struct {
	Code      *string           `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// readJSON decodes the request body into dst; an empty body leaves dst
// as it is. The content type is not checked.
func readJSON(w http.ResponseWriter, r *http.Request, dst any) bool {
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(dst)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return true
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxBody))
	default:
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
	}
	return false
}

// execute runs code on a context and streams its output as NDJSON. A
// client that goes away before the cell ends (an SDK call that timed out
// and aborted) cancels its cell, as E2B's server does, so the next cell
// on the context does not queue behind it: a queued cell never runs, a
// running one has its kernel interrupted. A resume's cut cancels nothing:
// the cell runs on, its output readable as a cell stream.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.Code == nil {
		writeError(w, http.StatusBadRequest, "code is required")
		return
	}
	if req.ContextID != "" && req.Language != "" {
		writeError(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	// The kernel manager bounds starts and restarts (--kernel-start-timeout).
	ctx := r.Context()
	kernelID := req.ContextID
	if kernelID != "" {
		if _, err := s.o.Kernels.Get(kernelID); err != nil {
			writeError(w, http.StatusNotFound, "Context "+kernelID+" not found")
			return
		}
	} else {
		var err error
		if kernelID, err = s.defaultContext(ctx, req.Language); err != nil {
			writeErr(w, err)
			return
		}
	}
	if s.o.Cuts.Closing() {
		writeError(w, http.StatusServiceUnavailable, surface.ErrClosing.Error())
		return
	}
	st, kernel, err := s.o.Kernels.ExecuteWith(ctx, kernelID, *req.Code, jupyter.ExecuteOptions{Env: req.EnvVars})
	if err != nil {
		writeErr(w, err)
		return
	}
	att, err := st.Attach(nil, 0)
	if err != nil {
		writeErr(w, err)
		return
	}
	ex := &execution{att: att, kernel: kernel, stream: st.ID}
	gen, untrack, err := s.o.Cuts.Track(ex)
	if err != nil {
		att.Close()
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	defer func() {
		untrack()
		att.Close()
	}()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := s.pump(r.Context(), &lineWriter{w: w, rc: http.NewResponseController(w)}, ex); err != nil {
		s.log.Debug("execute response ended early", zap.String("kernel", kernel), zap.Uint64("stream", st.ID), zap.Error(err))
		if r.Context().Err() != nil && !ex.cut.Load() {
			go s.abandoned(ex, gen)
		}
	}
}

// abandoned cancels the cell of a response whose client went away,
// unless a resume turns out to be why (goneSettle).
func (s *Server) abandoned(ex *execution, gen uint64) {
	time.Sleep(goneSettle)
	if ex.cut.Load() || s.o.Cuts.Generation() != gen {
		return
	}
	if err := s.o.Kernels.CancelCell(ex.stream, "its client went away"); err != nil {
		s.log.Debug("cancel an abandoned cell", zap.Uint64("stream", ex.stream), zap.Error(err))
	}
}

// pump writes the cell's events as lines until the cell ends, the
// attachment is cut (a resume) or the client goes away. Lines are flushed
// when no more output is ready, so a burst of output (or a cell's last
// lines and the end of the body) leaves in one write.
func (s *Server) pump(ctx context.Context, out *lineWriter, ex *execution) error {
	ready, none := context.WithCancel(context.Background())
	none() // Next with a done context returns only what is ready now
	errored := false
	for {
		it, err := ex.att.Next(ready, nil, 1<<20)
		if errors.Is(err, context.Canceled) {
			if err := out.flush(); err != nil {
				return err
			}
			nctx, cancel := context.WithTimeout(ctx, keepaliveEvery)
			it, err = ex.att.Next(nctx, nil, 1<<20)
			cancel()
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if err := out.line(markerLine{Type: "keepalive"}); err != nil {
				return err
			}
			continue
		default:
			return err
		}
		switch it.Kind {
		case stream.ItemEvent:
			ev, err := jupyter.DecodeCellEvent(it.Data)
			if err != nil {
				continue
			}
			line, ok := eventLine(ev)
			// E2B reports a cell's first error only.
			if !ok || (ev.Type == jupyter.CellError && errored) {
				continue
			}
			errored = errored || ev.Type == jupyter.CellError
			if err := out.line(line); err != nil {
				return err
			}
		case stream.ItemGap:
			note := fmt.Sprintf("[rayito-agent: %d output events of this cell were dropped before they were sent]\n", it.To-it.From)
			if err := out.line(textLine{Type: "stderr", Text: note}); err != nil {
				return err
			}
		case stream.ItemEnd:
			// Not flushed: the handler's return sends these lines and
			// the end of the body together.
			for _, line := range endLines(it.End, errored) {
				if err := out.line(line); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// endLines are the lines after a cell's last output: its execution
// count, an error line when it failed without the kernel saying why, and
// end_of_execution. A resume cut ends the response with one error line
// naming the resume; the cell itself goes on.
func endLines(e stream.End, errored bool) []any {
	if e.Reason == stream.ReasonResume {
		return []any{errorLine{Type: "error", Name: "SandboxResumed", Value: e.Message}}
	}
	var out []any
	if e.ExecutionCount != nil {
		out = append(out, countLine{Type: "number_of_executions", ExecutionCount: *e.ExecutionCount})
	}
	if !errored {
		var name string
		switch {
		case e.Reason == stream.ReasonClosed:
			name = "ContextShutDown"
		case e.Reason == stream.ReasonDone && e.Status == jupyter.StatusAborted:
			name = "ExecutionAborted"
		case e.Reason != stream.ReasonDone || (e.Status == jupyter.StatusError && e.Message != ""):
			name = "ExecutionError"
		}
		if name != "" {
			msg := e.Message
			if msg == "" {
				msg = "the cell ended without finishing (" + string(e.Reason) + ")"
			}
			out = append(out, errorLine{Type: "error", Name: name, Value: msg})
		}
	}
	return append(out, markerLine{Type: "end_of_execution"})
}

// Cut is the resume cut (surface.Cuttable): the response ends with an
// error line that names the resume; the cell keeps running on its kernel
// and its output stays readable through the native protocol.
func (ex *execution) Cut(_ context.Context, gen uint64) {
	ex.cut.Store(true)
	ex.att.Cut(stream.End{Reason: stream.ReasonResume, Message: fmt.Sprintf(
		"the sandbox was resumed (resume generation %d) while this cell ran; the cell keeps running on context %s, and its output is readable as cell stream %d of the agent's native protocol",
		gen, ex.kernel, ex.stream)})
}

// lineWriter writes NDJSON lines into the response's buffer.
type lineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (lw *lineWriter) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = lw.w.Write(append(b, '\n'))
	return err
}

// flush sends the buffered lines to the client.
func (lw *lineWriter) flush() error { return lw.rc.Flush() }
