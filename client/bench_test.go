package client_test

import (
	"context"
	"io"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// reportLatency reports the median and 99th percentile of lat.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkExecTrue is the round trip of running /bin/true through the
// client: exec request, spawn, exit, end event.
func BenchmarkExecTrue(b *testing.B) { benchExec(b, client.ExecOptions{Argv: []string{"/bin/true"}}) }

// BenchmarkExecTrueKeepAwake is BenchmarkExecTrue with a hold on the idle
// clock for each command: the cost of keep_awake.
func BenchmarkExecTrueKeepAwake(b *testing.B) {
	benchExec(b, client.ExecOptions{Argv: []string{"/bin/true"}, KeepAwake: true})
}

func benchExec(b *testing.B, o client.ExecOptions) {
	c := newAgent(b).dial(b, client.Options{})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		p, err := c.Exec(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
			b.Fatal(st, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkForkExecBaseline is a bare fork, exec and wait of /bin/true in
// this process, through the same reaper the agent uses.
func BenchmarkForkExecBaseline(b *testing.B) {
	r := testReaper(b)
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	fd := null.Fd()
	attr := &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}, Sys: &syscall.SysProcAttr{Setsid: true}}
	argv := []string{"/bin/true"}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		_, status, err := r.ForkExec(argv[0], argv, attr)
		if err != nil {
			b.Fatal(err)
		}
		if st := <-status; st.ExitCode() != 0 {
			b.Fatal(st)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

const throughputBytes = 1 << 30

// BenchmarkStdoutThroughput streams 1 GiB of a command's stdout through
// the websocket to the client.
func BenchmarkStdoutThroughput(b *testing.B) {
	c := newAgent(b).dial(b, client.Options{})
	ctx := context.Background()
	b.SetBytes(throughputBytes)
	b.ResetTimer()
	for range b.N {
		p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"head", "-c", "1073741824", "/dev/zero"}})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, p.Stdout())
		if err != nil || n != throughputBytes {
			b.Fatal(n, err)
		}
		if _, err := p.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStdoutPipeBaseline reads the same command's stdout from a local
// pipe in this process.
func BenchmarkStdoutPipeBaseline(b *testing.B) {
	r := testReaper(b)
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	buf := make([]byte, 256<<10)
	argv := []string{"/usr/bin/head", "-c", "1073741824", "/dev/zero"}
	b.SetBytes(throughputBytes)
	b.ResetTimer()
	for range b.N {
		pr, pw, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		attr := &syscall.ProcAttr{Files: []uintptr{null.Fd(), pw.Fd(), null.Fd()}, Sys: &syscall.SysProcAttr{Setsid: true}}
		_, status, err := r.ForkExec(argv[0], argv, attr)
		pw.Close()
		if err != nil {
			b.Fatal(err)
		}
		total := 0
		for {
			n, err := pr.Read(buf)
			total += n
			if err != nil {
				break
			}
		}
		pr.Close()
		<-status
		if total != throughputBytes {
			b.Fatal(total)
		}
	}
}

// BenchmarkCallRoundTrip is one request and its response (`list` of an
// empty agent): the websocket's share of every op's latency.
func BenchmarkCallRoundTrip(b *testing.B) {
	c := newAgent(b).dial(b, client.Options{})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := c.List(ctx, ""); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}
