package client

import (
	"context"
	"encoding/json"
	"fmt"
)

// KernelOptions describe a Jupyter kernel to start.
type KernelOptions struct {
	Name string // kernelspec name; "" is python3
	Cwd  string
	Env  map[string]string
}

// KernelInfo is one kernel as kernel_list reports it.
type KernelInfo struct {
	Kernel         string `json:"kernel"`
	UUID           string `json:"uuid"` // the id the jupyter_server API shows; ops take either
	Name           string `json:"name"`
	Pid            int    `json:"pid"`
	State          string `json:"state"` // starting, idle, busy, dead, lost
	ExecutionCount int    `json:"execution_count"`
}

// Kernel names a kernel on the agent; it holds no connection state, so
// any number of them may exist for one id.
type Kernel struct {
	c  *Client
	id string
}

// StartKernel starts a kernel and returns once it answers. If the
// connection drops before the answer, the request is sent again with its
// op_id: one kernel starts.
func (c *Client) StartKernel(ctx context.Context, o KernelOptions) (*Kernel, error) {
	res, err := c.call(ctx, "kernel_start", struct {
		Name string            `json:"name,omitempty"`
		Cwd  string            `json:"cwd,omitempty"`
		Env  map[string]string `json:"env,omitempty"`
	}{o.Name, o.Cwd, o.Env}, callOpts{once: true})
	if err != nil {
		return nil, fmt.Errorf("client: kernel_start: %w", err)
	}
	var r struct {
		Kernel string `json:"kernel"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.Kernel == "" {
		return nil, protocolErrorf("kernel_start result %s", res)
	}
	return &Kernel{c: c, id: r.Kernel}, nil
}

// DefaultKernel is the agent's default kernel: cells run on it without a
// kernel id, and the agent starts it on first use (and again if it died).
// Its ID is "". Interrupt, Restart and Shutdown act on the kernel the
// latest of this client's cells on it ran on.
func (c *Client) DefaultKernel() *Kernel { return &Kernel{c: c} }

// Kernel returns a handle for an existing kernel id.
func (c *Client) Kernel(id string) *Kernel { return &Kernel{c: c, id: id} }

// Kernels lists the agent's kernels.
func (c *Client) Kernels(ctx context.Context) ([]KernelInfo, error) {
	res, err := c.call(ctx, "kernel_list", struct{}{}, callOpts{retry: true})
	if err != nil {
		return nil, fmt.Errorf("client: kernel_list: %w", err)
	}
	var r struct {
		Kernels []KernelInfo `json:"kernels"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, protocolErrorf("kernel_list result: %v", err)
	}
	return r.Kernels, nil
}

// ID is the kernel's id ("k1"...), "" for DefaultKernel.
func (k *Kernel) ID() string { return k.id }

type executeParams struct {
	Code       string `json:"code"`
	Kernel     string `json:"kernel,omitempty"`
	TimeoutMs  int64  `json:"timeout_ms,omitempty"`
	AllowStdin bool   `json:"allow_stdin,omitempty"`
	KeepAwake  bool   `json:"keep_awake,omitempty"`
}

// Run queues a cell and returns once the agent accepted it; consume its
// events with the Cell (Next, Events or Wait), which also runs the
// callbacks of o. Like Exec it is never re-sent: if the connection drops
// before the answer, the cell may or may not run.
func (k *Kernel) Run(ctx context.Context, code string, o ExecuteOptions) (*Cell, error) {
	p := executeParams{Code: code, Kernel: k.id, TimeoutMs: ceilMs(o.Timeout), AllowStdin: o.AllowStdin || o.OnInput != nil, KeepAwake: o.KeepAwake}
	h, r, err := k.c.create(ctx, "execute", p, KindCell, outputs{})
	if err != nil {
		return nil, err
	}
	if k.id == "" && r.Kernel != "" {
		k.c.defKernel.Store(&r.Kernel)
	}
	cell := newCell(h, r.Kernel, o)
	cell.hold = r.Hold
	return cell, nil
}

// Execute runs a cell and waits for its end: the outputs, the status and
// the error if the code raised one (a cell that raised is not a Go
// error). Callbacks of o run as the outputs arrive. If ctx ends first,
// the cell goes on in the kernel (use Timeout to bound it there).
func (k *Kernel) Execute(ctx context.Context, code string, o ExecuteOptions) (*Execution, error) {
	cell, err := k.Run(ctx, code, o)
	if err != nil {
		return nil, err
	}
	ex, err := cell.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		cell.h.abandon(ctx.Err())
	}
	return ex, err
}

// Interrupt interrupts the kernel's running cell (which usually ends with
// a KeyboardInterrupt error).
func (k *Kernel) Interrupt(ctx context.Context) error { return k.op(ctx, "kernel_interrupt") }

// Restart replaces the kernel's process, keeping its id: its state is
// gone, the running cell ends with an error, queued ones are aborted.
func (k *Kernel) Restart(ctx context.Context) error { return k.op(ctx, "kernel_restart") }

// Shutdown stops the kernel; its id is gone at once.
func (k *Kernel) Shutdown(ctx context.Context) error { return k.op(ctx, "kernel_shutdown") }

func (k *Kernel) op(ctx context.Context, op string) error {
	id := k.id
	if id == "" {
		p := k.c.defKernel.Load()
		if p == nil {
			return fmt.Errorf("client: %s: %w", op, ErrNoDefaultKernel)
		}
		id = *p
	}
	_, err := k.c.call(ctx, op, struct {
		Kernel string `json:"kernel"`
	}{id}, callOpts{once: true})
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", op, id, err)
	}
	return nil
}
