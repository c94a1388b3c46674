package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Cell event types (CellEvent.Type).
const (
	CellStdout       = "stdout"
	CellStderr       = "stderr"
	CellResult       = "result"
	CellDisplay      = "display"
	CellError        = "error"
	CellInputRequest = "input_request"
)

// Cell statuses (Execution.Status), from the kernel's execute_reply.
const (
	StatusOK      = "ok"
	StatusError   = "error"
	StatusAborted = "aborted"
)

// ExecuteOptions tune a cell. The callbacks run on the goroutine that
// consumes the cell's events (Wait, Next or the Events feed), in order.
type ExecuteOptions struct {
	// Timeout bounds the cell once it reached the kernel: the kernel is
	// interrupted and the cell ends "aborted". 0: none.
	Timeout time.Duration
	// AllowStdin lets the code call input(); it is implied by OnInput.
	// Without OnInput answer the requests with Cell.Reply.
	AllowStdin bool
	// KeepAwake holds the sandbox's idle clock while the cell runs or
	// waits in the kernel's queue (see ExecOptions.KeepAwake).
	KeepAwake bool

	OnStdout, OnStderr  func(text string)
	OnResult, OnDisplay func(Output)
	OnError             func(ExecError)
	// OnInput answers input(): its value goes back to the kernel. If it
	// fails, the kernel is interrupted and Wait returns the error.
	OnInput func(prompt string, password bool) (string, error)
}

// Output is a result (execute_result, Main) or a display (display_data)
// of a cell: a MIME bundle, such as "text/plain" or base64 "image/png".
type Output struct {
	Main           bool
	Data           map[string]any
	ExecutionCount int
}

// Text returns the bundle's text/plain, "" if none.
func (o Output) Text() string {
	s, _ := o.Data["text/plain"].(string)
	return s
}

// ExecError is an exception the cell's code raised.
type ExecError struct {
	Name, Value string
	Traceback   []string
}

func (e ExecError) Error() string { return e.Name + ": " + e.Value }

// Execution is everything a cell produced.
type Execution struct {
	Kernel         string
	Stdout, Stderr string
	Results        []Output
	Displays       []Output
	Error          *ExecError // the first exception raised, nil if none
	Status         string     // ok, error, aborted
	ExecutionCount int
	Message        string // why the cell ended early ("timed out after 2s"), if it did
}

// Text returns the text/plain of the main result, "" if none.
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.Main {
			return r.Text()
		}
	}
	return ""
}

// CellEvent is one output of a cell as the agent streams it.
type CellEvent struct {
	Seq            uint64         `json:"seq"`
	Type           string         `json:"type"` // one of the Cell* constants
	Text           string         `json:"text"` // stdout, stderr
	Main           bool           `json:"main"` // result
	Data           map[string]any `json:"data"` // result, display
	ExecutionCount int            `json:"execution_count"`
	Name           string         `json:"name"` // error
	Value          string         `json:"value"`
	Traceback      []string       `json:"traceback"`
	Prompt         string         `json:"prompt"` // input_request
	Password       bool           `json:"password"`
}

// Cell is one execution of code on a kernel: the stream of its outputs.
//
// Concurrency: consume events with one of Next (one goroutine at a time),
// Events, or Wait; Wait after Next returns what remains and the whole
// Execution. Everything else from anywhere.
type Cell struct {
	h      *handle
	kernel string
	hold   string
	opts   ExecuteOptions
	feed   eventFeed[CellEvent]

	mu       sync.Mutex
	exec     Execution
	inputErr error // OnInput failed
}

func newCell(h *handle, kernel string, o ExecuteOptions) *Cell {
	return &Cell{h: h, kernel: kernel, opts: o, exec: Execution{Kernel: kernel}}
}

// AttachCell attaches to a running or recently ended cell and replays its
// events after the From cursor ("events"). Its Kernel is unknown ("").
func (c *Client) AttachCell(ctx context.Context, o AttachOptions) (*Cell, error) {
	h, _, err := c.attach(ctx, o, KindCell, outputs{})
	if err != nil {
		return nil, err
	}
	return newCell(h, "", ExecuteOptions{}), nil
}

// Stream is the agent's id of the cell's stream.
func (c *Cell) Stream() uint64 { return c.h.id }

// Hold is the id of the hold that ExecuteOptions.KeepAwake made.
func (c *Cell) Hold() string { return c.hold }

// Kernel is the id of the kernel the cell runs on.
func (c *Cell) Kernel() string { return c.kernel }

// Next returns the next event, waiting for one, after running its
// callback. It returns a *GapError once where events were dropped (call
// again to go on), and io.EOF after the cell ended (Wait gives the end).
func (c *Cell) Next(ctx context.Context) (CellEvent, error) {
	raw, err := c.h.events.next(ctx)
	if err != nil {
		return CellEvent{}, err
	}
	var ev CellEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return CellEvent{}, protocolErrorf("stream %d: malformed cell event: %v", c.h.id, err)
	}
	c.apply(ctx, ev)
	return ev, nil
}

// Events returns the events on a channel that is closed after the last
// one, skipping gaps. A goroutine delivers them (and runs the callbacks)
// until the end or until the client closes: drain the channel.
func (c *Cell) Events() <-chan CellEvent { return c.feed.start(c.h.c, c.Next) }

// apply adds an event to the Execution and runs its callback.
func (c *Cell) apply(ctx context.Context, ev CellEvent) {
	o := &c.opts
	c.mu.Lock()
	switch ev.Type {
	case CellStdout:
		c.exec.Stdout += ev.Text
	case CellStderr:
		c.exec.Stderr += ev.Text
	case CellResult:
		c.exec.Results = append(c.exec.Results, Output{Main: ev.Main, Data: ev.Data, ExecutionCount: ev.ExecutionCount})
	case CellDisplay:
		c.exec.Displays = append(c.exec.Displays, Output{Data: ev.Data})
	case CellError:
		if c.exec.Error == nil {
			c.exec.Error = &ExecError{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback}
		}
	}
	c.mu.Unlock()
	switch {
	case ev.Type == CellStdout && o.OnStdout != nil:
		o.OnStdout(ev.Text)
	case ev.Type == CellStderr && o.OnStderr != nil:
		o.OnStderr(ev.Text)
	case ev.Type == CellResult && o.OnResult != nil:
		o.OnResult(Output{Main: ev.Main, Data: ev.Data, ExecutionCount: ev.ExecutionCount})
	case ev.Type == CellDisplay && o.OnDisplay != nil:
		o.OnDisplay(Output{Data: ev.Data})
	case ev.Type == CellError && o.OnError != nil:
		o.OnError(ExecError{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback})
	case ev.Type == CellInputRequest && o.OnInput != nil:
		c.answer(ctx, ev)
	}
}

// answer replies to an input request with OnInput's value; if OnInput
// fails, the kernel is interrupted, which ends the waiting input().
func (c *Cell) answer(ctx context.Context, ev CellEvent) {
	value, err := c.opts.OnInput(ev.Prompt, ev.Password)
	if err == nil {
		err = c.Reply(ctx, value)
	} else if c.kernel != "" {
		c.h.c.Kernel(c.kernel).Interrupt(ctx)
	}
	if err != nil {
		c.mu.Lock()
		if c.inputErr == nil {
			c.inputErr = fmt.Errorf("client: answering input %q: %w", ev.Prompt, err)
		}
		c.mu.Unlock()
	}
}

// Reply answers the cell's pending input request (CellInputRequest).
func (c *Cell) Reply(ctx context.Context, value string) error {
	_, err := c.h.c.call(ctx, "input_reply", struct {
		Stream uint64 `json:"stream"`
		Value  string `json:"value"`
	}{c.h.id, value}, callOpts{once: true})
	return err
}

// Wait consumes the rest of the cell's events (running the callbacks)
// and returns the Execution once the cell ended; with Events it waits
// until the channel was drained. A cell whose code raised ends with
// Status "error" and Error set, not a Go error. On a Go error (the
// connection is lost for good, ctx ends, the kernel was shut down) the
// Execution holds what had arrived.
func (c *Cell) Wait(ctx context.Context) (*Execution, error) {
	if done := c.feed.running(); done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return c.snapshot(), ctx.Err()
		}
	} else {
		for {
			_, err := c.Next(ctx)
			var gap *GapError
			if errors.As(err, &gap) {
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return c.snapshot(), err
			}
		}
	}
	end, err := c.h.wait(ctx)
	if err != nil {
		return c.snapshot(), err
	}
	c.mu.Lock()
	c.exec.Status, c.exec.Message = end.Status, end.Message
	if end.ExecutionCount != nil {
		c.exec.ExecutionCount = *end.ExecutionCount
	}
	inputErr := c.inputErr
	c.mu.Unlock()
	ex := c.snapshot()
	if end.Reason != ReasonDone {
		return ex, fmt.Errorf("%w: cell %d ended with reason %q: %s", ErrStreamFailed, c.h.id, end.Reason, strings.TrimSpace(end.Message))
	}
	return ex, inputErr
}

// snapshot copies the Execution so far.
func (c *Cell) snapshot() *Execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	ex := c.exec
	ex.Results = append([]Output(nil), ex.Results...)
	ex.Displays = append([]Output(nil), ex.Displays...)
	return &ex
}

// Done is closed when the handle finished: the end arrived, or it failed.
func (c *Cell) Done() <-chan struct{} { return c.h.done }

// Detach stops receiving the cell's events; the cell runs on and keeps
// its events for a later AttachCell.
func (c *Cell) Detach(ctx context.Context) error { return c.h.detach(ctx) }

// Gaps returns the gaps the agent announced so far on this handle.
func (c *Cell) Gaps() []GapError { return c.h.recordedGaps() }

// Cursors returns what the application consumed ("events": the last
// seq): attach from it to continue where this handle stopped.
func (c *Cell) Cursors() map[string]uint64 { return c.h.cursors(true) }
