package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// ErrQMPClosed means QEMU closed the monitor (it exited).
var ErrQMPClosed = errors.New("qmp: connection closed")

// QMPError is an error QEMU returned for a command.
type QMPError struct {
	Command string
	Class   string
	Desc    string
}

func (e *QMPError) Error() string { return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc) }

// qmp is a synchronous QEMU Machine Protocol client: one command at a time
// (callers are serialized by mu), events are skipped while waiting for the
// answer. No goroutine of its own.
type qmp struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	id   uint64
}

// dialQMP connects to QEMU's monitor socket, retrying until it exists or
// ctx ends, and negotiates capabilities.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			q := &qmp{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
			if err := q.handshake(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			return q, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp dial %s: %w", path, errors.Join(ctx.Err(), err))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (q *qmp) handshake(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.setDeadline(ctx)
	// An event may come before the greeting: a loaded QEMU that starts
	// its machine as the client connects has sent RESUME first.
	for {
		var greeting struct {
			QMP   json.RawMessage `json:"QMP"`
			Event string          `json:"event"`
		}
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("qmp greeting: %w", err)
		}
		err = json.Unmarshal(line, &greeting)
		switch {
		case err == nil && greeting.Event != "":
			continue
		case err != nil || greeting.QMP == nil:
			return fmt.Errorf("qmp greeting: unexpected %q", line)
		}
		return q.executeLocked("qmp_capabilities", nil, nil)
	}
}

// execute runs one command; result, if not nil, receives its "return".
func (q *qmp) execute(ctx context.Context, cmd string, args any, result any) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.setDeadline(ctx)
	return q.executeLocked(cmd, args, result)
}

func (q *qmp) setDeadline(ctx context.Context) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Time{}
	}
	_ = q.conn.SetDeadline(deadline)
}

func (q *qmp) executeLocked(cmd string, args any, result any) error {
	q.id++
	req := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
		ID        uint64 `json:"id"`
	}{cmd, args, q.id}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return q.ioError(cmd, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return q.ioError(cmd, err)
		}
		var resp struct {
			Event  string          `json:"event"`
			ID     *uint64         `json:"id"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return fmt.Errorf("qmp %s: bad reply %q: %w", cmd, line, err)
		}
		if resp.Event != "" || resp.ID == nil || *resp.ID != q.id {
			continue
		}
		if resp.Error != nil {
			return &QMPError{Command: cmd, Class: resp.Error.Class, Desc: resp.Error.Desc}
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(resp.Return, result)
	}
}

func (q *qmp) ioError(cmd string, err error) error {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("qmp %s: %w", cmd, ErrQMPClosed)
	}
	return fmt.Errorf("qmp %s: %w", cmd, err)
}

func (q *qmp) Close() error { return q.conn.Close() }

// Monitor runs a command of QEMU's human monitor (such as "info jit")
// and returns what it printed: for diagnostics that QMP has no command
// for.
func (v *VM) Monitor(ctx context.Context, command string) (string, error) {
	var out string
	err := v.qmp.execute(ctx, "human-monitor-command", map[string]any{"command-line": command}, &out)
	return out, err
}
