package jupyter

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Reseeding kernels after a resume. Every clone of a snapshot has the
// same PRNG state in every kernel the template started: CPython's random
// seeds its global instance at import (ipykernel imports it), numpy's
// legacy global state, tempfile's name sequence. A resume is a fork of
// the whole machine, so each Python kernel does what CPython does in a
// child after os.fork() (random's register_at_fork hook reseeds its
// global instance) and a little more, on a signal: it runs between two
// bytecodes of whatever the main thread does (a running cell, a wait on
// input(), the idle event loop), sends no message on any channel, and
// counts as no execution. The handler is installed by a silent request
// when the kernel (re)starts, and acknowledges each reseed with a
// datagram to the agent's socket, naming the instance's nonce.

// ReseedSignal is the signal that has a Python kernel reseed: SIGRTMIN+7
// as glibc and CPython number it (signal.SIGRTMIN is 34). Real-time
// signals are otherwise unused by ipykernel and by Python programs.
const ReseedSignal = unix.Signal(41)

// reseedCode installs the handler; %s are the socket address and the
// instance's nonce as Python bytes literals. It leaves nothing in the
// user's namespace.
const reseedCode = `def _rayito_install(addr, nonce):
    import signal, socket, sys
    def reseed(signum, frame):
        status = b'ok'
        try:
            import random
            random.seed()
            np = sys.modules.get('numpy.random')
            if np is not None:
                np.seed()
            tf = sys.modules.get('tempfile')
            if tf is not None:
                tf._name_sequence = None
        except Exception as e:
            status = ('failed: %%s: %%s' %% (type(e).__name__, e)).encode()[:200]
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                s.sendto(nonce + b' ' + status, addr)
            finally:
                s.close()
        except OSError:
            pass
    signal.signal(%d, reseed)
_rayito_install(%s, %s)
del _rayito_install`

// reseeder is the agent's end: one datagram socket for every kernel's
// acknowledgements, made at the first install.
type reseeder struct {
	once sync.Once
	err  error
	conn *net.UnixConn
	addr string // abstract: no file, reachable by kernels of any user

	mu      sync.Mutex
	waiting map[string]chan string // nonce -> status
}

func (r *reseeder) start(log *zap.Logger) error {
	r.once.Do(func() {
		name := "@rayito-reseed-" + newID()
		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			r.err = fmt.Errorf("the kernels' reseed socket: %w", err)
			return
		}
		r.conn, r.addr, r.waiting = conn, "\x00"+name[1:], map[string]chan string{}
		go r.read(log)
	})
	return r.err
}

func (r *reseeder) read(log *zap.Logger) {
	buf := make([]byte, 512)
	for {
		n, err := r.conn.Read(buf)
		if err != nil {
			return
		}
		nonce, status, _ := strings.Cut(string(buf[:n]), " ")
		r.mu.Lock()
		ch := r.waiting[nonce]
		delete(r.waiting, nonce)
		r.mu.Unlock()
		if ch != nil {
			ch <- status
		} else {
			log.Debug("a reseed acknowledgement nobody waits for")
		}
	}
}

// close ends the socket; a start after it fails.
func (r *reseeder) close() {
	r.once.Do(func() { r.err = errClosing() })
	if r.conn != nil {
		r.conn.Close()
	}
}

// installReseed has a Python kernel's new process install the handler.
// A kernel without it is reported as not reseeded, with why.
func (k *Kernel) installReseed(inst *instance) {
	switch {
	case !k.m.reseedOn:
		inst.reseedWhy = "reseeding is turned off"
		return
	case !k.spec.isPython():
		inst.reseedWhy = "not a Python kernel (" + k.spec.Language + ")"
		return
	}
	if err := k.m.reseed.start(k.m.log); err != nil {
		inst.reseedWhy = err.Error()
		return
	}
	nonce := newID()
	code := fmt.Sprintf(reseedCode, int(ReseedSignal), pyBytes(k.m.reseed.addr), pyBytes(nonce))
	if err := k.silent(inst, code); err != nil {
		inst.reseedWhy = "installing the reseed handler failed: " + err.Error()
		k.log.Warn("a kernel will not be reseeded on resume", zap.Error(err))
		return
	}
	inst.reseedNonce = nonce
}

// pyBytes writes s as a Python bytes literal.
func pyBytes(s string) string {
	var b strings.Builder
	b.WriteString("b'")
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "\\x%02x", s[i])
	}
	b.WriteString("'")
	return b.String()
}

// KernelNotReseeded is a kernel that Reseed could not reseed, and why.
type KernelNotReseeded struct {
	Kernel string
	Reason string
}

// Reseed has every kernel's process reseed its PRNGs, at once, and waits
// for their acknowledgements until ctx ends. It returns the kernels that
// did, and the ones that did not with why (dead or lost, not Python, the
// handler replaced by user code, no answer in time).
func (m *Manager) Reseed(ctx context.Context) (reseeded []string, not []KernelNotReseeded) {
	ks := m.all()
	results := make([]string, len(ks)) // "" reseeded, else why not
	skip := make([]bool, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], skip[i] = k.reseedNow(ctx)
		}()
	}
	wg.Wait()
	for i, k := range ks {
		switch {
		case skip[i]:
		case results[i] == "":
			reseeded = append(reseeded, k.id)
		default:
			not = append(not, KernelNotReseeded{Kernel: k.id, Reason: results[i]})
		}
	}
	return reseeded, not
}

// reseedNow signals the kernel's process and waits for its answer; skip
// is true for a kernel shut down meanwhile.
func (k *Kernel) reseedNow(ctx context.Context) (why string, skip bool) {
	k.mu.Lock()
	inst, shut, died, lost := k.inst, k.shut, k.died, k.lost
	k.mu.Unlock()
	switch {
	case shut:
		return "", true
	case died != "":
		return "the kernel is dead", false
	case inst == nil:
		return "the kernel was (re)starting: its new process seeds itself from the re-keyed CRNG", false
	case lost:
		return "the kernel did not answer the survival check", false
	case inst.reseedNonce == "":
		return inst.reseedWhy, false
	}
	if !catches(inst.pid, ReseedSignal) {
		return fmt.Sprintf("the kernel no longer handles signal %d (user code replaced or reset its handler)", int(ReseedSignal)), false
	}
	r := &k.m.reseed
	ch := make(chan string, 1)
	r.mu.Lock()
	r.waiting[inst.reseedNonce] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, inst.reseedNonce)
		r.mu.Unlock()
	}()
	if err := unix.Kill(inst.pid, ReseedSignal); err != nil {
		return "signalling the kernel: " + err.Error(), false
	}
	select {
	case status := <-ch:
		if status != "ok" {
			return "the kernel's reseed " + status, false
		}
		return "", false
	case <-ctx.Done():
		return "no acknowledgement in time (the kernel's main thread is inside a long call, or user code replaced the handler); it reseeds when the call returns if the handler is still ours", false
	}
}

// catches reports whether process pid has a handler for sig (SigCgt in
// /proc/PID/status): sending a real-time signal to a process that does
// not catch it would kill it.
func catches(pid int, sig unix.Signal) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "SigCgt:")
		if !ok {
			continue
		}
		mask, err := hex.DecodeString(strings.TrimSpace(v))
		if err != nil || len(mask) != 8 {
			return false
		}
		bit := int(sig) - 1
		return mask[7-bit/8]&(1<<(bit%8)) != 0
	}
	return false
}
