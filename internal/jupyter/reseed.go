package jupyter

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// Reseeding kernels after a resume. Every clone of a snapshot has the
// same PRNG state in every kernel the template started: CPython's random
// seeds its global instance at import (ipykernel imports it), numpy's
// legacy global state, tempfile's name sequence. A resume is a fork of
// the whole machine, so each Python kernel does what CPython does in a
// child after os.fork() (random's register_at_fork hook reseeds its
// global instance) and a little more. A thread of the kernel's own,
// started by a silent request when the kernel (re)starts, waits on a
// datagram socket of its own and reseeds when the agent asks with the
// instance's nonce, then acknowledges with a datagram to the agent's
// socket: it sends no message on any channel, counts as no execution,
// and runs whatever the main thread does (a running cell, a wait on
// input(), the idle event loop), as soon as the main thread lets go of
// the interpreter lock, as it does every few milliseconds of Python code
// and in every wait. A signal would have served too, but user code that
// sets the signal's handler (its own, or the default, which ends the
// process) races the agent's check of it: one such kernel was killed by
// the reseed, and one with a handler of its own made every resume wait
// the whole bound for an acknowledgement that never came.

// reseedCode starts the thread; %s are the agent's socket address, the
// kernel's own and the instance's nonce, as Python bytes literals. It
// leaves nothing in the user's namespace.
const reseedCode = `def _rayito_install(agent, name, nonce):
    import socket, sys, threading
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(name)
    def reseed():
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
            return ('failed: %%s: %%s' %% (type(e).__name__, e)).encode()[:200]
        return b'ok'
    def serve():
        while True:
            try:
                msg = s.recv(256)
            except OSError:
                return
            if msg != nonce:
                continue
            status = reseed()
            try:
                s.sendto(nonce + b' ' + status, agent)
            except OSError:
                pass
    threading.Thread(target=serve, name='rayito-reseed', daemon=True).start()
_rayito_install(%s, %s, %s)
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

// installReseed has a Python kernel's new process start its reseed
// thread. A kernel without it is reported as not reseeded, with why.
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
	nonce, name := newID(), "\x00rayito-reseed-k-"+newID()
	code := fmt.Sprintf(reseedCode, pyBytes(k.m.reseed.addr), pyBytes(name), pyBytes(nonce))
	if err := k.silent(inst, code); err != nil {
		inst.reseedWhy = "starting the reseed thread failed: " + err.Error()
		k.log.Warn("a kernel will not be reseeded on resume", zap.Error(err))
		return
	}
	inst.reseedNonce, inst.reseedAddr = nonce, name
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
// did, and the ones that did not with why (dead or lost, not Python, no
// answer in time).
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

// reseedNow asks the kernel's reseed thread and waits for its answer; skip
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
	to := &net.UnixAddr{Name: "@" + inst.reseedAddr[1:], Net: "unixgram"}
	if _, err := r.conn.WriteToUnix([]byte(inst.reseedNonce), to); err != nil {
		return "asking the kernel's reseed thread: " + err.Error() + " (user code closed its socket?)", false
	}
	select {
	case status := <-ch:
		if status != "ok" {
			return "the kernel's reseed " + status, false
		}
		return "", false
	case <-ctx.Done():
		return "no acknowledgement in time (the kernel's main thread holds the interpreter lock in one long call); its reseed thread reseeds when the call returns", false
	}
}
