package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	agentpkg "github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/agenttest"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
)

const testToken = "client-test-token"

// waitLong bounds every wait for something that should happen soon; the
// machine may be busy, so it is generous.
const waitLong = 30 * time.Second

// testReaper is the process's one reaper, the test agents' too.
func testReaper(t testing.TB) *proc.Reaper { return agenttest.Reaper(t) }

// agent is a real agent served in-process, as the command builds it:
// commands, terminals, watches, kernels, files and resumes.
type agent struct {
	cuts    *surface.Cuts
	http    *httptest.Server
	streams *stream.Registry
	kernels *jupyter.Manager
	resume  *resume.Manager
	url     string
}

// newAgent serves a real agent in this process; limits, if given, bound
// its retention.
func newAgent(t testing.TB, limits ...stream.Limits) *agent {
	a := agenttest.New(t, agenttest.Options{Mount: func(ag *agentpkg.Agent) { endpoint.Mount(ag.Capabilities()) }, Config: agentpkg.Config{Token: testToken, Retention: append(limits, stream.Limits{})[0]}})
	return &agent{cuts: a.Cuts, http: a.HTTP, streams: a.Streams, kernels: a.Kernels, resume: a.Resumer, url: a.WS}
}

// dial connects a client with the test token; Close runs at cleanup.
func (a *agent) dial(t testing.TB, opts client.Options) *client.Client {
	return dialURL(t, a.url, opts)
}

func dialURL(t testing.TB, url string, opts client.Options) *client.Client {
	t.Helper()
	if opts.Token == "" {
		opts.Token = testToken
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	c, err := client.Dial(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxLong(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// ctxCuts bounds a test that reconnects a thousand times: each cut waits
// for a reconnect, which a loaded machine with the race detector slows
// far more than a single call (TestStdinSurvivesCuts took 33 s once in
// make test, past waitLong).
func ctxCuts(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// result is everything a process produced.
type result struct {
	stdout, stderr []byte
	status         client.ExitStatus
	err            error
}

// collect reads both channels to the end and waits for the exit.
func collect(ctx context.Context, p *client.Process) result {
	var r result
	var wg sync.WaitGroup
	var errOut, errErr error
	wg.Add(2)
	go func() { defer wg.Done(); r.stdout, errOut = io.ReadAll(p.Stdout()) }()
	go func() { defer wg.Done(); r.stderr, errErr = io.ReadAll(p.Stderr()) }()
	r.status, r.err = p.Wait(ctx)
	wg.Wait()
	r.err = errors.Join(r.err, errOut, errErr)
	return r
}

func run(t testing.TB, c *client.Client, o client.ExecOptions) result {
	t.Helper()
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, o)
	if err != nil {
		t.Fatalf("exec %v %q: %v", o.Argv, o.Cmd, err)
	}
	return collect(ctx, p)
}

func code(s client.ExitStatus) string { return s.String() }

// sh runs a script with /bin/sh: quicker than exec's Cmd, which runs a
// login bash.
func sh(script string) []string { return []string{"sh", "-c", script} }

// eventually polls cond until it holds or waitLong passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pattern is deterministic output whose byte at any offset is known, so a
// reader can check both content and position.
const pattern = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"

// patternCmd prints n bytes of pattern.
func patternCmd(n int) string {
	return fmt.Sprintf("yes %s | head -c %d", strings.TrimSuffix(pattern, "\n"), n)
}

// checkPattern verifies that b holds the pattern bytes from offset off.
func checkPattern(b []byte, off uint64) error {
	for i := range b {
		if want := pattern[(off+uint64(i))%uint64(len(pattern))]; b[i] != want {
			return fmt.Errorf("byte at offset %d is %q, want %q", off+uint64(i), b[i], want)
		}
	}
	return nil
}

// procAlive reports whether pid exists and is not a zombie.
func procAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// tcpProxy forwards TCP connections to an address and can cut every
// connection it carries, abruptly, like a network failure.
type tcpProxy struct {
	l      net.Listener
	target string
	// swallow drops what clients send, as a dying route would: from the
	// first byte it drops, a connection forwards nothing more.
	swallow atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
	stalls  []*atomic.Bool // per connection: forward nothing any more
	wg      sync.WaitGroup
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		l.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) url() string { return "ws://" + p.l.Addr().String() }

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			down.Close()
			continue
		}
		stalled := new(atomic.Bool)
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.stalls = append(p.stalls, stalled)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, down, &p.swallow, stalled)
		go p.pipe(down, up, stalled, stalled)
	}
}

func (p *tcpProxy) pipe(dst, src net.Conn, swallow, stalled *atomic.Bool) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	// Once this connection lost bytes it forwards nothing more, as a
	// dying route: TCP never delivers what follows a hole, and passing
	// it on would splice websocket frames (a frame's header with another
	// frame's bytes as its payload), which no real network does.
	dead := false
	for {
		n, err := src.Read(buf)
		dead = dead || n > 0 && swallow.Load()
		if n > 0 && !dead && !stalled.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// retarget sends new connections to addr; "" refuses them (closes each
// at once), as an agent that is down would.
func (p *tcpProxy) retarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// stall makes every connection through the proxy go silent both ways
// without closing it, as a route that died without a reset; new
// connections still work.
func (p *tcpProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.stalls {
		s.Store(true)
	}
}

// cut closes every connection through the proxy; new ones still work.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not a graceful close
		}
		c.Close()
	}
	p.conns, p.stalls = nil, nil
}

// cutAndWait cuts the proxy's connections and waits until the client
// reconnected (n counts its OnReconnect calls): a second cut while the
// client is still reconnecting would find nothing to cut.
func (p *tcpProxy) cutAndWait(t testing.TB, n *atomic.Int32) {
	t.Helper()
	before := n.Load()
	p.cut()
	eventually(t, "the client reconnected", func() bool { return n.Load() > before })
}

// TestMain fails the run if a client goroutine outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := clientGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked client goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// clientGoroutines waits up to d for goroutines running client code to end
// and returns the stacks of those that did not.
func clientGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "rayito-agent/client.") && !strings.Contains(g, "client_test.") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
