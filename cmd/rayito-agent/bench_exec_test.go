package main

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/proc"
)

// execBlock is how many execs of one kind run before the next kind's
// turn: the kinds alternate, so a change in the machine's load hits all.
const execBlock = 20

// BenchmarkAgentExec is `/bin/true` run through an agent process, against
// baselines measured in the same run: a bare os/exec Run, and the same
// spawn through the agent's reaper (fork, exec, SIGCHLD, wait4), in this
// process. Each op runs every kind once (in blocks of execBlock).
// Metrics: p50 of each; `sdk/osexec` is the first goal (at most 1.3), and
// `sdk-adds-µs`, `bare-adds-µs` what the agent adds over the reaper
// spawn (at most 200). On a loaded machine the CPU time of every process
// per exec, the agent's own CPU per exec (its threads, not its children)
// and its context switches per exec (how often its threads slept and were
// woken) tell more than the latencies. The SDK names each exec with an
// op_id; bare-opid is bare with one, so `opid-adds-µs` is what the agent's
// exactly-once bookkeeping costs an exec. floor is the same exec through
// the least a Go websocket agent must do for it (bench_floor_test.go):
// `floor/osexec` is what the machine allows any such agent, `bare/floor`
// what the agent's own design adds.
func BenchmarkAgentExec(b *testing.B) {
	a := startAgentProc(b)
	c := a.dial(b)
	rc := a.raw(b)
	floor := startFloor(b)
	ctx := context.Background()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	fd := null.Fd()
	attr := &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}, Sys: &syscall.SysProcAttr{Setsid: true}}
	argv := []string{"/bin/true"}
	opID := 0

	kinds := []struct {
		name string
		run  func(n int) []time.Duration
	}{
		{"osexec", func(n int) []time.Duration {
			return timeEach(n, func() {
				if err := exec.Command(argv[0]).Run(); err != nil {
					b.Fatal(err)
				}
			})
		}},
		{"reaper", func(n int) []time.Duration {
			// Only while this block runs: a reaper steals the statuses
			// os/exec waits for.
			r, err := proc.NewReaper()
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			return timeEach(n, func() {
				_, status, err := r.ForkExec(argv[0], argv, attr)
				if err != nil {
					b.Fatal(err)
				}
				if st := <-status; st.ExitCode() != 0 {
					b.Fatal(st)
				}
			})
		}},
		{"sdk", func(n int) []time.Duration {
			return timeEach(n, func() {
				p, err := c.Exec(ctx, client.ExecOptions{Argv: argv})
				if err != nil {
					b.Fatal(err)
				}
				if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
					b.Fatal(st, err)
				}
			})
		}},
		{"bare", func(n int) []time.Duration {
			return timeEach(n, func() { rc.execTrue("") })
		}},
		{"bare-opid", func(n int) []time.Duration {
			return timeEach(n, func() {
				opID++
				rc.execTrue(`"op_id":"bench-` + strconv.Itoa(opID) + `",`)
			})
		}},
		{"floor", func(n int) []time.Duration {
			return timeEach(n, func() { floor.execTrue(b) })
		}},
	}
	lat := make([][]time.Duration, len(kinds))
	cpu := make([]time.Duration, len(kinds))      // CPU of this process, the agent and the floor server, per kind
	switches := make([]int, len(kinds))           // the agent's context switches, per kind
	agentCPU := make([]time.Duration, len(kinds)) // the agent's own threads' CPU, per kind
	b.ResetTimer()
	var floorCPU time.Duration // the floor server's own threads, in its turns
	floorSwitches := 0
	for done := 0; done < b.N; done += execBlock {
		n := min(execBlock, b.N-done)
		for i, k := range kinds {
			cpu0, sw0, own0 := ownCPU()+a.cpu(b)+floor.proc.cpu(b), a.switches(b), a.threadsCPU(b)
			fcpu0, fsw0 := floor.proc.threadsCPU(b), floor.proc.switches(b)
			lat[i] = append(lat[i], k.run(n)...)
			cpu[i] += ownCPU() + a.cpu(b) + floor.proc.cpu(b) - cpu0
			switches[i] += a.switches(b) - sw0
			agentCPU[i] += a.threadsCPU(b) - own0
			if k.name == "floor" {
				floorCPU += floor.proc.threadsCPU(b) - fcpu0
				floorSwitches += floor.proc.switches(b) - fsw0
			}
		}
	}
	b.StopTimer()
	for i, k := range kinds {
		b.ReportMetric(micros(cpu[i])/float64(b.N), k.name+"-CPU-µs/op")
	}
	b.ReportMetric(micros(agentCPU[2])/float64(b.N), "sdk-agent-CPU-µs/op")
	b.ReportMetric(micros(agentCPU[3])/float64(b.N), "bare-agent-CPU-µs/op")
	b.ReportMetric(micros(agentCPU[4])/float64(b.N), "bare-opid-agent-CPU-µs/op")
	b.ReportMetric(float64(switches[2])/float64(b.N), "sdk-agent-switches/op")
	b.ReportMetric(float64(switches[3])/float64(b.N), "bare-agent-switches/op")
	b.ReportMetric(micros(floorCPU)/float64(b.N), "floor-server-CPU-µs/op")
	b.ReportMetric(float64(floorSwitches)/float64(b.N), "floor-server-switches/op")
	p50 := make(map[string]float64)
	for i, k := range kinds {
		p50[k.name] = micros(quantile(lat[i], 0.5))
		b.ReportMetric(p50[k.name], k.name+"-p50-µs")
	}
	b.ReportMetric(micros(quantile(lat[2], 0.99)), "sdk-p99-µs")
	b.ReportMetric(p50["sdk"]/p50["osexec"], "sdk/osexec")
	b.ReportMetric(p50["bare"]/p50["osexec"], "bare/osexec")
	b.ReportMetric(p50["floor"]/p50["osexec"], "floor/osexec")
	b.ReportMetric(p50["sdk"]/p50["floor"], "sdk/floor")
	b.ReportMetric(p50["bare"]/p50["floor"], "bare/floor")
	b.ReportMetric(p50["sdk"]-p50["reaper"], "sdk-adds-µs")
	b.ReportMetric(p50["bare"]-p50["reaper"], "bare-adds-µs")
	b.ReportMetric(p50["bare-opid"]-p50["bare"], "opid-adds-µs")
}

func timeEach(n int, f func()) []time.Duration {
	lat := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		f()
		lat[i] = time.Since(start)
	}
	return lat
}

// execTrue runs /bin/true with bare frames: the request (with extra
// parameters, each followed by a comma), its response, then the stream's
// end event.
func (rc *rawConn) execTrue(extra string) {
	id := rc.request("exec", extra+`"argv":["/bin/true"]`)
	var stream uint64
	for {
		typ, msg := rc.read()
		if typ != websocket.MessageText {
			continue
		}
		m := rc.decode(msg)
		switch {
		case m.ID == id:
			stream = m.Result.Stream
		case m.Event == "end" && m.Stream == stream && stream != 0:
			return
		case m.Event == "end":
			rc.tb.Fatalf("end of stream %d before the response: %s (id %s)", m.Stream, msg, strconv.FormatUint(id, 10))
		}
	}
}
