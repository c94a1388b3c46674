package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process/processconnect"
)

// The side-by-side benchmarks run E2B's envd beside the agent on this
// machine and drive both with the same client code: envd's process API
// over Connect (the e2b SDK's protocol, which the agent also serves), the
// agent's own SDK besides, and a baseline without any daemon. They run
// only where RAYITO_BENCH_ENVD names an envd binary, for example one built
// from e2b-dev/infra's packages/envd with `CGO_ENABLED=0 go build -ldflags
// "-s -w"`; RAYITO_BENCH_BUSY=N starts N busy loops beside them for the
// benchmark's duration (CPU contention).

// startEnvd starts envd outside Firecracker on a free port of 127.0.0.1
// (it listens on every address: the port is found free on 127.0.0.1 and
// given to it) and waits for its /health.
func startEnvd(tb testing.TB) *agentProc {
	tb.Helper()
	bin := os.Getenv("RAYITO_BENCH_ENVD")
	if bin == "" {
		tb.Skip("RAYITO_BENCH_ENVD names no envd binary")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-isnotfc", "-no-cgroups", "-port", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	e := &agentProc{cmd: cmd, pid: cmd.Process.Pid, addr: "127.0.0.1:" + strconv.Itoa(port)}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + e.addr + "/health")
		if err == nil {
			resp.Body.Close()
			return e
		}
		if time.Since(start) > 30*time.Second {
			tb.Fatalf("envd did not answer /health: %v", err)
		}
	}
}

// busyLoops starts RAYITO_BENCH_BUSY busy loops, ended at cleanup.
func busyLoops(tb testing.TB) int {
	n, _ := strconv.Atoi(os.Getenv("RAYITO_BENCH_BUSY"))
	for range n {
		loop := exec.Command("sh", "-c", "while :; do :; done")
		if err := loop.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { loop.Process.Kill(); loop.Wait() })
	}
	return n
}

// headers adds what envd's clients send: the user, as the e2b SDK names
// it, and the agent's token (envd, never initialised, has none to check).
type headers struct{ next http.RoundTripper }

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Basic cm9vdDo=") // root:
	r.Header.Set("X-Access-Token", benchToken)
	return h.next.RoundTrip(r)
}

// processClient is envd's process API at a daemon's address.
func processClient(addr string) processconnect.ProcessClient {
	hc := &http.Client{Transport: headers{http.DefaultTransport}}
	return processconnect.NewProcessClient(hc, "http://"+addr)
}

// connectRun starts argv through the process API and reads its events to
// the end: the bytes of its stdout and of its terminal, and its exit code.
func connectRun(tb testing.TB, pc processconnect.ProcessClient, req *process.StartRequest) (out int64, code int32) {
	stream, err := pc.Start(context.Background(), connect.NewRequest(req))
	if err != nil {
		tb.Fatal(err)
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out += int64(len(d.GetStdout()) + len(d.GetPty()))
		}
		if end := ev.GetEnd(); end != nil {
			return out, end.GetExitCode()
		}
	}
	tb.Fatalf("the stream ended without an end event: %v", stream.Err())
	return
}

// sideBySide is what the exec and output rows drive: envd, an agent, the
// busy loops asked for, an SDK client of the agent, and a process API
// client of each daemon.
type sideBySide struct {
	envd, agent       *agentProc
	busy              int
	sdk               *client.Client
	agentRPC, envdRPC processconnect.ProcessClient
}

func startSideBySide(b *testing.B) *sideBySide {
	e := startEnvd(b)
	a := startAgentProc(b)
	return &sideBySide{envd: e, agent: a, busy: busyLoops(b), sdk: a.dial(b), agentRPC: processClient(a.addr), envdRPC: processClient(e.addr)}
}

func startReq(argv ...string) *process.StartRequest {
	return &process.StartRequest{Process: &process.ProcessConfig{Cmd: argv[0], Args: argv[1:]}}
}

// BenchmarkEnvdExec is `/bin/true` through the agent (its SDK, and the
// process API) and through envd (the process API, the same client code),
// against a bare os/exec Run in this process, in blocks of execBlock
// that alternate. Metrics: p50 of each and their ratios to os/exec and to
// each other; the CPU time each daemon spent per exec with its children.
func BenchmarkEnvdExec(b *testing.B) {
	sb := startSideBySide(b)
	ctx := context.Background()
	viaRPC := func(pc processconnect.ProcessClient) func() {
		return func() {
			if _, code := connectRun(b, pc, startReq("/bin/true")); code != 0 {
				b.Fatal(code)
			}
		}
	}
	kinds := []struct {
		name   string
		daemon *agentProc
		run    func()
	}{
		{"osexec", nil, func() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}},
		{"agent-sdk", sb.agent, func() {
			p, err := sb.sdk.Exec(ctx, client.ExecOptions{Argv: []string{"/bin/true"}})
			if err != nil {
				b.Fatal(err)
			}
			if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
				b.Fatal(st, err)
			}
		}},
		{"agent-rpc", sb.agent, viaRPC(sb.agentRPC)},
		{"envd-rpc", sb.envd, viaRPC(sb.envdRPC)},
	}
	lat := make([][]time.Duration, len(kinds))
	cpu := make([]time.Duration, len(kinds)) // the daemon's CPU with its children, per kind
	b.ResetTimer()
	for done := 0; done < b.N; done += execBlock {
		n := min(execBlock, b.N-done)
		for i, k := range kinds {
			var cpu0 time.Duration
			if k.daemon != nil {
				cpu0 = k.daemon.cpu(b)
			}
			lat[i] = append(lat[i], timeEach(n, k.run)...)
			if k.daemon != nil {
				cpu[i] += k.daemon.cpu(b) - cpu0
			}
		}
	}
	b.StopTimer()
	p50 := make(map[string]float64)
	for i, k := range kinds {
		p50[k.name] = micros(quantile(lat[i], 0.5))
		b.ReportMetric(p50[k.name], k.name+"-p50-µs")
		if k.daemon != nil {
			b.ReportMetric(micros(cpu[i])/float64(b.N), k.name+"-daemon-CPU-µs/op")
		}
	}
	b.ReportMetric(p50["agent-sdk"]/p50["osexec"], "agent-sdk/osexec")
	b.ReportMetric(p50["agent-rpc"]/p50["osexec"], "agent-rpc/osexec")
	b.ReportMetric(p50["envd-rpc"]/p50["osexec"], "envd-rpc/osexec")
	b.ReportMetric(p50["envd-rpc"]/p50["agent-sdk"], "envd/agent-sdk")
	b.ReportMetric(float64(sb.busy), "busy-loops")
}

// BenchmarkEnvdOutput is the stdout of `head -c 256MiB /dev/zero` read
// from a pipe in this process, through the agent (its SDK, and the process
// API) and through envd (the process API), each op running every kind in
// turn. With RAYITO_BENCH_BUSY=2 it is issue #41's contention row.
// Metrics: MiB/s of each (median over the ops) and the medians of each
// op's ratios to envd's and to the pipe's.
func BenchmarkEnvdOutput(b *testing.B) {
	sb := startSideBySide(b)
	buf := make([]byte, 1<<20)
	viaRPC := func(pc processconnect.ProcessClient) func() {
		return func() {
			if n, code := connectRun(b, pc, startReq(outputArgv...)); n != outputBytes || code != 0 {
				b.Fatal(n, code)
			}
		}
	}
	kinds := []struct {
		name string
		run  func()
	}{
		{"pipe", func() { pipeRead(b, buf) }},
		{"agent-sdk", func() { readAll(b, sb.sdk, outputArgv, outputBytes) }},
		{"agent-rpc", viaRPC(sb.agentRPC)},
		{"envd-rpc", viaRPC(sb.envdRPC)},
	}
	rates := make([][]float64, len(kinds))
	b.SetBytes(outputBytes * int64(len(kinds)))
	b.ResetTimer()
	for i := range b.N {
		for j := range kinds {
			k := (i + j) % len(kinds) // rotate who goes first
			start := time.Now()
			kinds[k].run()
			rates[k] = append(rates[k], float64(outputBytes)/(1<<20)/time.Since(start).Seconds())
		}
	}
	b.StopTimer()
	ratio := func(k, to int) float64 {
		r := make([]float64, len(rates[k]))
		for i := range r {
			r[i] = rates[k][i] / rates[to][i]
		}
		return median(r)
	}
	for k, kind := range kinds {
		b.ReportMetric(median(rates[k]), kind.name+"-MiB/s")
	}
	b.ReportMetric(ratio(1, 3), "agent-sdk/envd")
	b.ReportMetric(ratio(2, 3), "agent-rpc/envd")
	b.ReportMetric(ratio(1, 0), "agent-sdk/pipe")
	b.ReportMetric(ratio(3, 0), "envd/pipe")
	b.ReportMetric(float64(sb.busy), "busy-loops")
}

// BenchmarkEnvdMemoryAfterWork is issue #41's workload run through the
// process API against envd and against the agent (the same client code),
// and through the SDK against a second agent: two outputs of 256 MiB,
// 2,000 keystrokes echoed by `cat` on a terminal, ten outputs of 8 MiB,
// 256 MiB into `cat > /dev/null`. Metrics: each daemon's resident memory
// idle and settle after the run.
func BenchmarkEnvdMemoryAfterWork(b *testing.B) {
	for range b.N {
		e := startEnvd(b)
		a := startAgentProc(b)
		sdkAgent := startAgentProc(b)
		time.Sleep(2 * time.Second)
		for _, d := range []struct {
			name   string
			daemon *agentProc
			work   func()
		}{
			{"envd", e, func() { rpcWorkload(b, processClient(e.addr)) }},
			{"agent-rpc", a, func() { rpcWorkload(b, processClient(a.addr)) }},
			{"agent-sdk", sdkAgent, func() { sdkWorkload(b, sdkAgent.dial(b)) }},
		} {
			idle, _ := d.daemon.memory(b)
			d.work()
			time.Sleep(settle)
			after, _ := d.daemon.memory(b)
			b.ReportMetric(mib(idle), d.name+"-idle-MiB")
			b.ReportMetric(mib(after), fmt.Sprintf("%s-after-%gs-MiB", d.name, settle.Seconds()))
		}
	}
}

// rpcWorkload is the memory workload through envd's process API.
func rpcWorkload(tb testing.TB, pc processconnect.ProcessClient) {
	ctx := context.Background()
	big := startReq("head", "-c", strconv.Itoa(256<<20), "/dev/zero")
	for range 2 {
		if n, _ := connectRun(tb, pc, big); n != 256<<20 {
			tb.Fatal(n)
		}
	}
	// The terminal: one keystroke at a time, each waited for.
	pty := startReq("cat")
	pty.Pty = &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}}
	stream, err := pc.Start(ctx, connect.NewRequest(pty))
	if err != nil {
		tb.Fatal(err)
	}
	pid := startedPid(tb, stream)
	for range 2000 {
		in := &process.SendInputRequest{
			Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
			Input:   &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte("k")}},
		}
		if _, err := pc.SendInput(ctx, connect.NewRequest(in)); err != nil {
			tb.Fatal(err)
		}
		for got := false; !got; {
			if !stream.Receive() {
				tb.Fatal(stream.Err())
			}
			got = len(stream.Msg().GetEvent().GetData().GetPty()) > 0
		}
	}
	sig := &process.SendSignalRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}, Signal: process.Signal_SIGNAL_SIGKILL}
	if _, err := pc.SendSignal(ctx, connect.NewRequest(sig)); err != nil {
		tb.Fatal(err)
	}
	for stream.Receive() {
	}
	stream.Close()
	eight := startReq("head", "-c", strconv.Itoa(8<<20), "/dev/zero")
	for range 10 {
		if n, _ := connectRun(tb, pc, eight); n != 8<<20 {
			tb.Fatal(n)
		}
	}
	sendInput(tb, pc, 256)
}

// sendInput pipes mib MiB into `cat > /dev/null` through the process API,
// 1 MiB per SendInput, and waits for the command's end.
func sendInput(tb testing.TB, pc processconnect.ProcessClient, mib int) {
	ctx := context.Background()
	sink := startReq("sh", "-c", "cat > /dev/null")
	stdin := true
	sink.Stdin = &stdin
	stream, err := pc.Start(ctx, connect.NewRequest(sink))
	if err != nil {
		tb.Fatal(err)
	}
	defer stream.Close()
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: startedPid(tb, stream)}}
	chunk := make([]byte, 1<<20)
	for range mib {
		in := &process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: chunk}}}
		if _, err := pc.SendInput(ctx, connect.NewRequest(in)); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := pc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel})); err != nil {
		tb.Fatal(err)
	}
	for stream.Receive() {
		if stream.Msg().GetEvent().GetEnd() != nil {
			return
		}
	}
	tb.Fatal("no end event:", stream.Err())
}

// startedPid reads a Start stream up to its start event.
func startedPid(tb testing.TB, stream *connect.ServerStreamForClient[process.StartResponse]) uint32 {
	for stream.Receive() {
		if s := stream.Msg().GetEvent().GetStart(); s != nil {
			return s.GetPid()
		}
	}
	tb.Fatal("no start event:", stream.Err())
	return 0
}
