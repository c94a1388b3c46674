package jupyter

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Cell statuses of an `end` event with reason done.
const (
	StatusOK      = "ok"
	StatusError   = "error"
	StatusAborted = "aborted"
)

// EventsChannel is the name of the event channel of cell and relay streams.
const EventsChannel = "events"

// cell is one execute request: its stream, and the state that decides when
// it is finished. The kernel's runner starts it; the client's pumps
// deliver its messages; finish may come from either, or from a kernel that
// dies, restarts or shuts down. Only the first finish counts.
type cell struct {
	s          *stream.Stream
	log        *stream.Log
	code       string
	timeout    time.Duration
	allowStdin bool
	env        map[string]string // set for this cell only
	finished   chan struct{}

	mu       sync.Mutex
	inst     *instance
	msgID    string
	started  bool
	replied  bool
	idle     bool
	status   string
	count    *int
	timedOut time.Duration
	input    *message // the input_request waiting for a reply
	ended    bool
	// cancelled is closed by cancel once the cell has started: its runner
	// then interrupts the kernel as for a timeout, for cancelWhy.
	cancelled chan struct{}
	cancelWhy string
}

// newCellStream registers the cell's stream. The cell is the stream's
// Control, which is how Manager.InputReply finds it from a stream id.
func newCellStream(reg *stream.Registry, code string, timeout time.Duration, allowStdin bool) *cell {
	c := &cell{code: code, timeout: timeout, allowStdin: allowStdin, finished: make(chan struct{}), cancelled: make(chan struct{})}
	c.s = reg.Create(stream.Config{
		Kind:     stream.KindCell,
		Channels: []stream.ChannelSpec{{Name: EventsChannel, Unit: stream.Events, Policy: stream.Drop}},
		Control:  c,
	})
	c.log = c.s.Log(EventsChannel)
	return c
}

// emit appends one cell event body (cellevent.go). Events after the end
// are dropped.
func (c *cell) emit(body any) {
	b, err := json.Marshal(body)
	if err != nil {
		return
	}
	c.log.Append(func(uint64) []byte { return b })
}

func (c *cell) note(text string) { c.emit(textEvent{Type: CellStderr, Text: text}) }

// start sends the execute request on inst, unless the cell already ended.
func (c *cell) start(inst *instance) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	m, err := newMessage(inst.conn.session, "execute_request", nil, map[string]any{
		"code": c.code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
		"allow_stdin": c.allowStdin,
		// Cells are independent requests: an error in one must not
		// abort the next.
		"stop_on_error": false,
	})
	if err != nil {
		c.mu.Unlock()
		c.finish(doneEnd(StatusError, nil, err.Error()))
		return
	}
	c.inst, c.msgID, c.started = inst, m.MsgID, true
	inst.conn.register(m.MsgID, c)
	c.mu.Unlock()
	if err := inst.conn.send(chShell, m); err != nil {
		if inst.ctx.Err() != nil {
			// The process is going away (it died, or a restart or a
			// shutdown stops it), maybe after the kernel got the cell:
			// on a loaded machine zmq4 returned only then. What tears
			// the process down ends the cell with what happened, which
			// says more than a failed send.
			select {
			case <-c.finished:
				return
			case <-time.After(teardownWait):
			}
		}
		c.finish(doneEnd(StatusError, nil, fmt.Sprintf("cannot send the cell to the kernel: %v", err)))
	}
}

// teardownWait bounds how long a cell whose send failed waits for its
// process's teardown to end it (instance.watch: the process's output has
// up to half a second to drain before the kernel hears of the exit).
const teardownWait = 10 * time.Second

// deliver handles the kernel's messages for this cell, on the pumps.
func (c *cell) deliver(ch channel, m *message) {
	body, err := m.content()
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	switch {
	case ch == chIOPub && m.MsgType == "stream":
		if body.Text != "" && (body.Name == "stdout" || body.Name == "stderr") {
			c.emit(textEvent{Type: body.Name, Text: body.Text})
		}
	case ch == chIOPub && m.MsgType == "execute_result":
		c.emit(resultEvent{Type: CellResult, Main: true, Data: orEmpty(body.Data), ExecutionCount: body.ExecutionCount})
	case ch == chIOPub && (m.MsgType == "display_data" || m.MsgType == "update_display_data"):
		c.emit(displayEvent{Type: CellDisplay, Data: orEmpty(body.Data)})
	case ch == chIOPub && m.MsgType == "error":
		c.emit(errorEvent{Type: CellError, Name: body.EName, Value: body.EValue, Traceback: orNone(body.Traceback)})
	case ch == chIOPub && m.MsgType == "status" && body.ExecutionState == "idle":
		c.idle = true
	case ch == chShell && m.MsgType == "execute_reply":
		c.replied, c.status, c.count = true, body.Status, body.ExecutionCount
	case ch == chStdin && m.MsgType == "input_request":
		c.input = m
		c.emit(inputEvent{Type: CellInputRequest, Prompt: body.Prompt, Password: body.Password})
	}
	// Outputs precede idle on iopub, so reply plus idle means everything
	// the cell printed is in the log.
	if c.replied && c.idle {
		status := c.status
		if status != StatusOK && status != StatusAborted {
			status = StatusError
		}
		msg := ""
		if c.timedOut > 0 {
			status, msg = StatusAborted, timeoutMessage(c.timedOut)
		}
		c.endLocked(doneEnd(status, c.count, msg))
	}
}

// finish ends the cell unless it already ended.
func (c *cell) finish(e stream.End) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(e)
}

func (c *cell) endLocked(e stream.End) {
	if c.ended {
		return
	}
	c.ended, c.input = true, nil
	if c.inst != nil {
		c.inst.conn.unregister(c.msgID)
	}
	c.s.Finish(e)
	close(c.finished)
}

// markTimedOut records that the cell ran past its timeout; it reports
// whether the cell is still running.
func (c *cell) markTimedOut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timedOut = c.timeout
	return !c.ended
}

// cancel stops the cell for why: a queued cell ends at once, aborted,
// and never reaches the kernel; a running one is interrupted by its
// runner (runCell). It reports whether the cell was still to stop.
func (c *cell) cancel(why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended || c.cancelWhy != "":
		return false
	case !c.started:
		c.endLocked(doneEnd(StatusAborted, nil, "cancelled before it ran: "+why))
	default:
		c.cancelWhy = why
		close(c.cancelled)
	}
	return true
}

// reply answers the pending input_request.
func (c *cell) reply(value string) error {
	c.mu.Lock()
	req, inst := c.input, c.inst
	c.input = nil
	c.mu.Unlock()
	if req == nil {
		return wire.Errorf(wire.CodeConflict, "cell stream %d is not waiting for input", c.s.ID)
	}
	m, err := newMessage(inst.conn.session, "input_reply", req.Header, map[string]string{"value": value})
	if err != nil {
		return err
	}
	if err := inst.conn.send(chStdin, m); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "cannot reach the kernel: %v", err)
	}
	return nil
}

func doneEnd(status string, count *int, msg string) stream.End {
	return stream.End{Reason: stream.ReasonDone, Status: status, ExecutionCount: count, Message: msg}
}

func timeoutMessage(d time.Duration) string { return fmt.Sprintf("timed out after %v", d) }

func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}")
	}
	return raw
}

func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
