package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// settle is how long after a burst the agent's memory is read again: the
// agent should have given it back by then.
const settle = 5 * time.Second

func mib(kib int) float64 { return float64(kib) / 1024 }

// readAll runs argv through c and reads its stdout to the end.
func readAll(tb testing.TB, c *client.Client, argv []string, want int64) {
	ctx := context.Background()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: argv})
	if err != nil {
		tb.Error(err)
		return
	}
	if n, err := io.Copy(io.Discard, p.Stdout()); err != nil || n != want {
		tb.Error(n, err)
	}
	if _, err := p.Wait(ctx); err != nil {
		tb.Error(err)
	}
}

// burst runs n commands writing size bytes each at once, every one read
// to the end by its own goroutine on one of clients.
func burst(tb testing.TB, clients []*client.Client, n, size int) {
	argv := []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readAll(tb, clients[i%len(clients)], argv, int64(size))
		}()
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
}

// BenchmarkAgentMemory is the agent's resident memory around bursts of
// output that clients read to the end, each in an agent process of its
// own: its peak during the burst, right after it, and settle later (the
// goal: memory given back).
func BenchmarkAgentMemory(b *testing.B) {
	cases := []struct {
		name        string
		conns, n    int
		size        int
		goalSettled float64 // MiB
	}{
		{"six-256MiB", 1, 6, 256 << 20, 20},
		{"twenty-8MiB", 1, 20, 8 << 20, 24},
		{"200-connections-1MiB", 200, 200, 1 << 20, 0},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			a := startAgentProc(b)
			clients := make([]*client.Client, tc.conns)
			for i := range clients {
				clients[i] = a.dial(b)
			}
			var peak, after, settled []float64
			for range b.N {
				a.resetPeak(b)
				burst(b, clients, tc.n, tc.size)
				rss, hwm := a.memory(b)
				time.Sleep(settle)
				rss2, _ := a.memory(b)
				peak, after, settled = append(peak, mib(hwm)), append(after, mib(rss)), append(settled, mib(rss2))
			}
			b.ReportMetric(median(peak), "peak-MiB")
			b.ReportMetric(median(after), "end-MiB")
			b.ReportMetric(median(settled), fmt.Sprintf("after-%gs-MiB", settle.Seconds()))
		})
	}
}

// BenchmarkAgentExecChurn runs b.N execs of `true` on four connections at
// once and reports how the agent's memory grew from the first tenth to the
// end: it should stay flat, ended streams being kept by count and bytes.
func BenchmarkAgentExecChurn(b *testing.B) {
	a := startAgentProc(b)
	const conns = 4
	clients := make([]*client.Client, conns)
	for i := range clients {
		clients[i] = a.dial(b)
	}
	ctx := context.Background()
	run := func(n int) {
		var wg sync.WaitGroup
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := i; j < n; j += conns {
					p, err := clients[i].Exec(ctx, client.ExecOptions{Argv: []string{"true"}})
					if err != nil {
						b.Error(err)
						return
					}
					p.Wait(ctx)
				}
			}()
		}
		wg.Wait()
	}
	warm := max(b.N/10, 1)
	start := time.Now()
	run(warm)
	rss0, _ := a.memory(b)
	run(b.N - warm)
	rss1, hwm := a.memory(b)
	elapsed := time.Since(start)
	list, err := clients[0].List(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "execs/s")
	b.ReportMetric(mib(rss0), "RSS-first-tenth-MiB")
	b.ReportMetric(mib(rss1), "RSS-end-MiB")
	b.ReportMetric(mib(hwm), "peak-MiB")
	b.ReportMetric(float64(len(list)), "streams-kept")
}

// BenchmarkAgentBufferHeld starts four commands with `buffer` 256 MiB
// that write 256 MiB each and are never read (overflow drop, not
// attached), and reports the agent's memory once they exited and settle
// later: one retention budget for the whole agent bounds it. A request the
// budget cannot meet is refused (`limit`) and counted. It runs with the
// default budget and with --retention-budget 1GiB.
func BenchmarkAgentBufferHeld(b *testing.B) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"default-budget", nil},
		{"budget-1GiB", []string{"--retention-budget", "1GiB"}},
	} {
		b.Run(tc.name, func(b *testing.B) { bufferHeld(b, tc.flags) })
	}
}

func bufferHeld(b *testing.B, flags []string) {
	a := startAgentProc(b, flags...)
	rc := a.raw(b)
	const size = 256 << 20
	params := `"argv":["head","-c","` + strconv.Itoa(size) + `","/dev/zero"],"buffer":` + strconv.Itoa(size) + `,"overflow":"drop","attach":false`
	var accepted, refused int
	var held, settled []float64
	for range b.N {
		for range 4 {
			id := rc.request("exec", params)
			for {
				m := rc.controlFrame()
				if m.ID != id {
					continue
				}
				if m.Error != nil && m.Error.Code == "limit" {
					refused++
				} else if m.Error != nil {
					b.Fatal(m.Error.Message)
				} else {
					accepted++
				}
				break
			}
		}
		deadline := time.Now().Add(2 * time.Minute)
		for rc.running() > 0 {
			if time.Now().After(deadline) {
				b.Fatal("the commands did not end")
			}
			time.Sleep(100 * time.Millisecond)
		}
		rss, _ := a.memory(b)
		time.Sleep(settle)
		rss2, _ := a.memory(b)
		held, settled = append(held, mib(rss)), append(settled, mib(rss2))
	}
	b.ReportMetric(median(held), "end-MiB")
	b.ReportMetric(median(settled), fmt.Sprintf("after-%gs-MiB", settle.Seconds()))
	b.ReportMetric(float64(accepted)/float64(b.N), "accepted")
	b.ReportMetric(float64(refused)/float64(b.N), "refused")
}

// BenchmarkAgentMemoryAfterWork is issue #41's workload, in an agent
// process of its own: two outputs of 256 MiB read through the SDK, 2,000
// keystrokes echoed by a terminal, ten outputs of 8 MiB, 256 MiB into
// `cat > /dev/null` through Process.Write; the agent's resident memory
// idle (before) and settle after the run.
func BenchmarkAgentMemoryAfterWork(b *testing.B) {
	for range b.N {
		a := startAgentProc(b)
		time.Sleep(2 * time.Second)
		idle, _ := a.memory(b)
		sdkWorkload(b, a.dial(b))
		time.Sleep(settle)
		after, _ := a.memory(b)
		b.ReportMetric(mib(idle), "idle-MiB")
		b.ReportMetric(mib(after), fmt.Sprintf("after-%gs-MiB", settle.Seconds()))
		a.stop()
	}
}

// sdkWorkload is issue #41's workload through the agent's SDK.
func sdkWorkload(tb testing.TB, c *client.Client) {
	ctx := context.Background()
	readAll(tb, c, []string{"head", "-c", strconv.Itoa(256 << 20), "/dev/zero"}, 256<<20)
	readAll(tb, c, []string{"head", "-c", strconv.Itoa(256 << 20), "/dev/zero"}, 256<<20)
	t, err := c.PTY(ctx, client.PTYOptions{Argv: []string{"cat"}})
	if err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 64)
	for range 2000 {
		if _, err := t.Write([]byte("k")); err != nil {
			tb.Fatal(err)
		}
		if _, err := t.Output().Read(buf); err != nil {
			tb.Fatal(err)
		}
	}
	t.Signal(ctx, client.Signal("SIGKILL"))
	for range 10 {
		readAll(tb, c, []string{"head", "-c", strconv.Itoa(8 << 20), "/dev/zero"}, 8<<20)
	}
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", "cat > /dev/null"}, Stdin: true})
	if err != nil {
		tb.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for range 256 {
		if _, err := p.Write(chunk); err != nil {
			tb.Fatal(err)
		}
	}
	if err := p.CloseStdin(ctx); err != nil {
		tb.Fatal(err)
	}
	p.Wait(ctx)
}
