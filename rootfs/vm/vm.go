package vm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

var (
	// ErrExited means QEMU is gone (it exited, crashed or was killed).
	ErrExited = errors.New("vm: qemu exited")
	// ErrNotHealthy means the agent did not answer /health in time.
	ErrNotHealthy = errors.New("vm: agent not healthy")
	// ErrGuestPanic means the guest kernel panicked (QEMU then exits too).
	ErrGuestPanic = errors.New("vm: guest kernel panic")
)

// How the VM polls and how long it waits for QEMU to go away.
const (
	healthPoll     = 100 * time.Millisecond
	healthTimeout  = 2 * time.Second // one /health request
	qmpStartWait   = 30 * time.Second
	quitWait       = 5 * time.Second
	serialTailSize = 4096
)

// VM is one running QEMU process. Its methods are safe for concurrent use
// (QMP commands are serialized). It owns one goroutine, which waits for
// QEMU to exit; Kill and Close end QEMU and so that goroutine.
type VM struct {
	m      machine
	in     instance
	ownDir bool
	log    *zap.Logger
	cmd    *exec.Cmd
	qmp    *qmp
	client *http.Client

	exited  chan struct{} // closed when QEMU has exited
	waitErr error         // set before exited is closed

	closeOnce sync.Once
	closeErr  error
}

// Boot starts a VM from cfg. It returns once QEMU is running and its
// monitor answers; WaitHealthy waits for the agent. With AccelAuto and a
// usable /dev/kvm it also waits for the agent on KVM, and boots again on
// TCG if that does not work within Config.KVMProbeTimeout.
func Boot(ctx context.Context, cfg Config) (*VM, error) {
	cfg = cfg.withDefaults()
	accel := cfg.Accel
	if accel == AccelAuto {
		accel = AccelTCG
		if ok, why := kvmUsable(); !ok {
			cfg.Log.Info("no usable KVM here; running on TCG", zap.String("why", why))
		} else if kvmHung.Load() {
			cfg.Log.Info("KVM did not boot a VM earlier in this process; running on TCG")
		} else {
			v, err := bootAccel(ctx, cfg, AccelKVM)
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, cfg.KVMProbeTimeout)
				err = v.WaitHealthy(pctx)
				cancel()
				if err == nil {
					return v, nil
				}
				v.Close()
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// One line: QEMU's abort and the console are in err, but
			// the fallback is expected on machines where KVM half works.
			cfg.Log.Info("KVM did not boot the VM; running on TCG", zap.String("why", firstLine(err)))
			kvmHung.Store(true)
		}
	}
	return bootAccel(ctx, cfg, accel)
}

func bootAccel(ctx context.Context, cfg Config, accel Accel) (*VM, error) {
	m, err := newMachine(cfg, accel)
	if err != nil {
		return nil, err
	}
	in, ownDir, err := newInstance(cfg)
	if err != nil {
		return nil, err
	}
	if err := createLayer(ctx, m.Image, in.disk()); err != nil {
		cleanupDir(in.Dir, ownDir)
		return nil, err
	}
	return start(ctx, cfg, m, in, ownDir)
}

// newInstance picks the work directory, a host port and a new vmgenid.
func newInstance(cfg Config) (instance, bool, error) {
	in := instance{Dir: cfg.WorkDir, HostPort: cfg.HostPort, GUID: newGUID()}
	ownDir := false
	if in.Dir == "" {
		dir, err := os.MkdirTemp("", "rayito-vm-")
		if err != nil {
			return instance{}, false, err
		}
		in.Dir, ownDir = dir, true
	} else if err := os.MkdirAll(in.Dir, 0o755); err != nil {
		return instance{}, false, err
	}
	for _, f := range []string{in.qmp(), in.serial(), in.disk()} {
		_ = os.Remove(f)
	}
	if in.HostPort == 0 {
		port, err := freePort()
		if err != nil {
			cleanupDir(in.Dir, ownDir)
			return instance{}, false, err
		}
		in.HostPort = port
	}
	return in, ownDir, nil
}

// start runs QEMU for m and connects to its monitor.
func start(ctx context.Context, cfg Config, m machine, in instance, ownDir bool) (*VM, error) {
	out, err := os.Create(in.output())
	if err != nil {
		cleanupDir(in.Dir, ownDir)
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(m.QEMU, qemuArgs(m, in)...)
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group: a terminal's ctrl-C is for us, not for QEMU.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cleanupDir(in.Dir, ownDir)
		return nil, fmt.Errorf("vm: start qemu: %w", err)
	}
	v := &VM{
		m: m, in: in, ownDir: ownDir, cmd: cmd,
		log:    cfg.Log.With(zap.Int("qemu_pid", cmd.Process.Pid), zap.Int("port", in.HostPort)),
		client: &http.Client{Timeout: healthTimeout},
		exited: make(chan struct{}),
	}
	go func() {
		v.waitErr = cmd.Wait()
		close(v.exited)
	}()
	qctx, cancel := context.WithTimeout(ctx, qmpStartWait)
	defer cancel()
	go func() {
		select {
		case <-v.exited:
			cancel()
		case <-qctx.Done():
		}
	}()
	v.qmp, err = dialQMP(qctx, in.qmp())
	if err != nil {
		// A monitor that fails usually means QEMU is exiting; say why.
		select {
		case <-v.exited:
		case <-time.After(quitWait):
		}
		err = v.exitError(err)
		v.Close()
		return nil, err
	}
	v.log.Info("qemu started", zap.String("accel", string(m.Accel)), zap.String("dir", in.Dir),
		zap.Bool("incoming", in.Incoming != ""))
	return v, nil
}

// AgentURL is the agent's base URL on the host, e.g. http://127.0.0.1:40123.
func (v *VM) AgentURL() string { return "http://127.0.0.1:" + strconv.Itoa(v.in.HostPort) }

// HostPort is the host port forwarded to the agent.
func (v *VM) HostPort() int { return v.in.HostPort }

// Accel is the accelerator the VM runs on.
func (v *VM) Accel() Accel { return v.m.Accel }

// GUID is the VM generation id the guest sees.
func (v *VM) GUID() string { return v.in.GUID }

// Dir is the work directory (disk layer, QMP socket, logs).
func (v *VM) Dir() string { return v.in.Dir }

// SerialLog is the path of the guest console's log file.
func (v *VM) SerialLog() string { return v.in.serial() }

// Exited is closed when QEMU has exited.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// WaitHealthy polls the agent's GET /health until it answers 200, QEMU
// exits or ctx ends.
func (v *VM) WaitHealthy(ctx context.Context) error {
	url := v.AgentURL() + "/health"
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := v.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /health: %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v (last error: %v); console:\n%s", ErrNotHealthy, ctx.Err(), last, v.SerialTail())
		case <-v.exited:
			return v.exitError(ErrNotHealthy)
		case <-t.C:
		}
	}
}

// Pause stops the guest's CPUs; Resume starts them again (also after a
// Snapshot, which leaves the VM paused).
func (v *VM) Pause(ctx context.Context) error { return v.qmp.execute(ctx, "stop", nil, nil) }

// Resume continues a paused guest.
func (v *VM) Resume(ctx context.Context) error { return v.qmp.execute(ctx, "cont", nil, nil) }

// Shutdown asks the guest to shut down cleanly, by pressing ctrl-alt-del
// (rayito-init powers off, systemd reboots; -no-reboot makes QEMU exit on
// either), and waits for QEMU to exit.
func (v *VM) Shutdown(ctx context.Context) error {
	keys := []map[string]string{
		{"type": "qcode", "data": "ctrl"}, {"type": "qcode", "data": "alt"}, {"type": "qcode", "data": "delete"},
	}
	if err := v.qmp.execute(ctx, "send-key", map[string]any{"keys": keys}, nil); err != nil {
		return v.exitError(err)
	}
	select {
	case <-v.exited:
	case <-ctx.Done():
		return fmt.Errorf("vm: guest did not shut down: %w; console:\n%s", ctx.Err(), v.SerialTail())
	}
	// A panic also ends QEMU (panic=-1, -no-reboot): not a clean shutdown.
	if tail := v.SerialTail(); strings.Contains(tail, "Kernel panic") {
		return fmt.Errorf("%w; console:\n%s", ErrGuestPanic, tail)
	}
	return nil
}

// Kill ends QEMU at once, as a host crash would, and waits for it.
// The work directory stays until Close.
func (v *VM) Kill() error {
	select {
	case <-v.exited:
		return nil
	default:
	}
	if err := v.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-v.exited
	return nil
}

// Close asks QEMU to quit, kills it if it does not, and removes the work
// directory if Boot made it. Calling it again does nothing.
func (v *VM) Close() error {
	v.closeOnce.Do(func() {
		if v.qmp != nil {
			ctx, cancel := context.WithTimeout(context.Background(), quitWait)
			err := v.qmp.execute(ctx, "quit", nil, nil)
			cancel()
			if err != nil && !errors.Is(err, ErrQMPClosed) {
				v.log.Debug("qmp quit", zap.Error(err))
			}
			select {
			case <-v.exited:
			case <-time.After(quitWait):
			}
			v.qmp.Close()
		}
		v.closeErr = v.Kill()
		v.client.CloseIdleConnections()
		cleanupDir(v.in.Dir, v.ownDir)
	})
	return v.closeErr
}

// SerialTail returns the end of the guest console log.
func (v *VM) SerialTail() string {
	b, err := os.ReadFile(v.in.serial())
	if err != nil {
		return "(no console log: " + err.Error() + ")"
	}
	if len(b) > serialTailSize {
		b = b[len(b)-serialTailSize:]
	}
	return string(b)
}

// exitError wraps err with why QEMU exited, if it did.
func (v *VM) exitError(err error) error {
	select {
	case <-v.exited:
	default:
		return err
	}
	out, _ := os.ReadFile(v.in.output())
	return fmt.Errorf("%w: %w (%v): %s; console:\n%s", err, ErrExited, v.waitErr, out, v.SerialTail())
}

func cleanupDir(dir string, own bool) {
	if own {
		_ = os.RemoveAll(dir)
	}
}
