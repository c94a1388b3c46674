package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/client"
)

// The headline benchmarks run the agent as users run it: the static
// binary, `serve` in a process of its own, on 127.0.0.1:0. In-process
// figures flatter the agent (it then shares the scheduler and the heap
// with the client), so those are kept only as a breakdown in the packages.

// benchToken is the access token of every benchmark agent.
const benchToken = "bench-token"

var agentBuild struct {
	once     sync.Once
	dir, bin string
	err      error
}

// agentBinary builds the agent once per test binary, as `make build`
// does; RAYITO_BENCH_AGENT names another binary to measure instead (an
// older build, to compare before and after in one run).
func agentBinary(tb testing.TB) string {
	if bin := os.Getenv("RAYITO_BENCH_AGENT"); bin != "" {
		return bin
	}
	agentBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "rayito-bench-")
		if err != nil {
			agentBuild.err = err
			return
		}
		agentBuild.dir, agentBuild.bin = dir, filepath.Join(dir, "rayito-agent")
		agentBuild.err = buildAgent(agentBuild.bin, "")
	})
	if agentBuild.err != nil {
		tb.Fatal(agentBuild.err)
	}
	return agentBuild.bin
}

// buildAgent builds the agent to bin as make build does, with extra
// linker flags (-X ... to stamp a version).
func buildAgent(bin, ldflags string) error {
	build := exec.Command("go", "build", "-trimpath", "-tags", "nethttpomithttp2", "-ldflags=-s -w "+ldflags, "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	return nil
}

// agentProc is a running agent process.
type agentProc struct {
	cmd  *exec.Cmd
	pid  int
	addr string
	url  string
	once sync.Once
	mu   sync.Mutex
	log  []string // its first maxLogLines log lines
}

// maxLogLines bounds the log lines an agentProc keeps.
const maxLogLines = 1000

// startAgentProc starts `serve` with extra flags and waits for the address
// it logs. The agent is stopped (SIGINT, then SIGKILL) at cleanup.
func startAgentProc(tb testing.TB, flags ...string) *agentProc {
	tb.Helper()
	return startAgentProcFrom(tb, agentBinary(tb), flags...)
}

// startAgentProcFrom is startAgentProc for the binary bin.
func startAgentProcFrom(tb testing.TB, bin string, flags ...string) *agentProc {
	tb.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--state-dir", tb.TempDir(), "--log-level", "info"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "RAYITO_ACCESS_TOKEN="+benchToken)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	a := &agentProc{cmd: cmd, pid: cmd.Process.Pid}
	tb.Cleanup(a.stop)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			a.mu.Lock()
			if len(a.log) < maxLogLines {
				a.log = append(a.log, sc.Text())
			}
			a.mu.Unlock()
			var line struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			if !sent && json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				addr <- line.Listen
				sent = true
			}
		}
		io.Copy(io.Discard, stderr)
		if !sent {
			close(addr)
		}
	}()
	select {
	case a.addr = <-addr:
	case <-time.After(30 * time.Second):
	}
	if a.addr == "" {
		tb.Fatal("the agent did not start serving")
	}
	a.url = "ws://" + a.addr
	return a
}

// stop ends the agent (SIGINT, SIGKILL after 15 s); later calls do nothing.
func (a *agentProc) stop() {
	a.once.Do(func() {
		a.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { a.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			a.cmd.Process.Kill()
			<-done
		}
	})
}

// dial connects an SDK client; it is closed at cleanup.
func (a *agentProc) dial(tb testing.TB) *client.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, a.url, client.Options{Token: benchToken})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// memory is the agent's resident memory in KiB: now and its peak.
func (a *agentProc) memory(tb testing.TB) (rss, peak int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.pid) + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			peak = n
		}
	}
	return rss, peak
}

// anonymous is the agent's anonymous resident memory in KiB (RssAnon):
// what it holds, without the pages of its binary it has run.
func (a *agentProc) anonymous(tb testing.TB) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.pid) + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	tb.Fatal("no RssAnon in /proc/PID/status")
	return 0
}

// cpu is the CPU time the agent used so far, with its reaped children.
func (a *agentProc) cpu(tb testing.TB) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	// The fields after the command name (which may hold spaces): utime,
	// stime, cutime and cstime are the 12th to 15th, in clock ticks.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var ticks int64
	for _, v := range f[11:15] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// threadsCPU is the CPU time the agent's own threads used so far (not its
// children's), to the nanosecond: what the agent itself costs per op, a
// figure the machine's load moves far less than latencies.
func (a *agentProc) threadsCPU(tb testing.TB) time.Duration {
	// schedstat's first field is the time on a CPU, in ns.
	return time.Duration(a.sumThreads(tb, "schedstat", func(text string) int64 {
		f := strings.Fields(text)
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		return n
	}))
}

// switches counts the voluntary context switches of every thread of the
// agent: how often a thread went to sleep (to be woken again), a measure
// of the hand-offs between goroutines on different threads that a loaded
// machine blurs far less than times (preemptions are not counted).
func (a *agentProc) switches(tb testing.TB) int {
	return int(a.sumThreads(tb, "status", func(text string) int64 {
		for _, line := range strings.Split(text, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && k == "voluntary_ctxt_switches" {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		return 0
	}))
}

// sumThreads adds up value of the file /proc/PID/task/TID/file of every
// thread of the agent (a thread that ends meanwhile is left out).
func (a *agentProc) sumThreads(tb testing.TB, file string, value func(string) int64) int64 {
	dir := "/proc/" + strconv.Itoa(a.pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for _, t := range tasks {
		if b, err := os.ReadFile(dir + t.Name() + "/" + file); err == nil {
			total += value(string(b))
		}
	}
	return total
}

// ownCPU is the CPU time this process and its reaped children used.
func ownCPU() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// resetPeak restarts the kernel's count of the agent's peak RSS.
func (a *agentProc) resetPeak(tb testing.TB) {
	if err := os.WriteFile("/proc/"+strconv.Itoa(a.pid)+"/clear_refs", []byte("5"), 0); err != nil {
		tb.Fatal(err)
	}
}

// health waits until /health answers.
func (a *agentProc) health(tb testing.TB) {
	resp, err := http.Get("http://" + a.addr + "/health")
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
}

// rawConn is a websocket to the agent driven with bare frames and the
// wire package, without the SDK: the agent's own share of a figure.
type rawConn struct {
	tb     testing.TB
	ws     *websocket.Conn
	nextID uint64
	ctx    context.Context
	buf    []byte
}

func (a *agentProc) raw(tb testing.TB) *rawConn {
	tb.Helper()
	ctx := context.Background()
	hdr := http.Header{"Authorization": {"Bearer " + benchToken}}
	ws, _, err := websocket.Dial(ctx, a.url+"/v1/connect", &websocket.DialOptions{Subprotocols: []string{"rayito.v1"}, HTTPHeader: hdr})
	if err != nil {
		tb.Fatal(err)
	}
	ws.SetReadLimit(64 << 20)
	tb.Cleanup(func() { ws.CloseNow() })
	rc := &rawConn{tb: tb, ws: ws, ctx: ctx}
	if _, msg := rc.read(); !bytes.Contains(msg, []byte(`"hello"`)) {
		tb.Fatalf("first frame %q", msg)
	}
	return rc
}

// read returns the next message, valid until the next read: it is read
// into a buffer kept across reads, as a client that cares for speed does.
func (rc *rawConn) read() (websocket.MessageType, []byte) {
	typ, r, err := rc.ws.Reader(rc.ctx)
	if err != nil {
		rc.tb.Fatal(err)
	}
	n := 0
	for {
		if n == len(rc.buf) {
			rc.buf = append(rc.buf, make([]byte, max(len(rc.buf), 64<<10))...)
		}
		k, err := r.Read(rc.buf[n:])
		n += k
		if err == io.EOF {
			return typ, rc.buf[:n]
		}
		if err != nil {
			rc.tb.Fatal(err)
		}
	}
}

func (rc *rawConn) send(msg []byte) {
	if err := rc.ws.Write(rc.ctx, websocket.MessageText, msg); err != nil {
		rc.tb.Fatal(err)
	}
}

// request sends an op (params is the JSON object's inside, after the op)
// and returns its id.
func (rc *rawConn) request(op, params string) uint64 {
	rc.nextID++
	msg := `{"id":` + strconv.FormatUint(rc.nextID, 10) + `,"op":"` + op + `"`
	if params != "" {
		msg += "," + params
	}
	rc.send([]byte(msg + "}"))
	return rc.nextID
}

// control is what the benchmarks read of a text frame.
type control struct {
	ID     uint64 `json:"id"`
	Event  string `json:"event"`
	Stream uint64 `json:"stream"`
	Result struct {
		Stream uint64 `json:"stream"`
	} `json:"result"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (rc *rawConn) decode(msg []byte) control {
	var m control
	if err := json.Unmarshal(msg, &m); err != nil {
		rc.tb.Fatalf("frame %q: %v", msg, err)
	}
	if m.Error != nil {
		rc.tb.Fatalf("error: %s", msg)
	}
	return m
}

// controlFrame reads up to the next text frame, errors included.
func (rc *rawConn) controlFrame() control {
	for {
		typ, msg := rc.read()
		if typ != websocket.MessageText {
			continue
		}
		var m control
		if err := json.Unmarshal(msg, &m); err != nil {
			rc.tb.Fatalf("frame %q: %v", msg, err)
		}
		return m
	}
}

// running counts the agent's running streams (`list`).
func (rc *rawConn) running() int {
	id := rc.request("list", "")
	for {
		typ, msg := rc.read()
		if typ != websocket.MessageText {
			continue
		}
		var m struct {
			ID     uint64 `json:"id"`
			Result struct {
				Streams []struct {
					State string `json:"state"`
				} `json:"streams"`
			} `json:"result"`
		}
		if json.Unmarshal(msg, &m) != nil || m.ID != id {
			continue
		}
		n := 0
		for _, s := range m.Result.Streams {
			if s.State == "running" {
				n++
			}
		}
		return n
	}
}

// call sends an op and waits for its response, skipping other frames.
func (rc *rawConn) call(op, params string) control {
	id := rc.request(op, params)
	for {
		typ, msg := rc.read()
		if typ == websocket.MessageText {
			if m := rc.decode(msg); m.ID == id {
				return m
			}
		}
	}
}

// quantile returns the q-quantile of lat (sorted in place).
func quantile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[int(float64(len(lat)-1)*q)]
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// median of a few ratios or rates.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
