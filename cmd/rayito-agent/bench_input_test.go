package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// BenchmarkAgentStdin: 256 MiB into `cat > /dev/null` through the SDK's
// Process.Write (numbered input, waiting for room), against the same
// bytes written into a local pipe to the same program, in the same run,
// the two kinds alternating.
//
//	go test -run '^$' -bench 'AgentStdin$' -benchtime 3x ./cmd/rayito-agent/
func BenchmarkAgentStdin(b *testing.B) {
	const size = 256 << 20
	a := startAgentProc(b)
	c := a.dial(b)
	defer c.Close()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	feed := func(w io.Writer) {
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
	}
	var viaAgent, local time.Duration
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		started := time.Now()
		p, err := c.Exec(ctx, client.ExecOptions{Cmd: "cat > /dev/null", Stdin: true})
		if err != nil {
			b.Fatal(err)
		}
		feed(p)
		if err := p.CloseStdin(ctx); err != nil {
			b.Fatal(err)
		}
		if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
			b.Fatalf("cat: %v %v", st, err)
		}
		viaAgent += time.Since(started)

		started = time.Now()
		cmd := exec.Command("/bin/sh", "-c", "cat > /dev/null")
		w, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		feed(w)
		w.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		local += time.Since(started)
	}
	mibps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / (1 << 20) / d.Seconds() }
	b.ReportMetric(mibps(viaAgent), "agent-MiB/s")
	b.ReportMetric(mibps(local), "pipe-MiB/s")
	b.ReportMetric(mibps(viaAgent)/mibps(local), "agent/pipe")
}
