package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/fsnotify/fsnotify"

	"github.com/rayito/rayito-agent/client"
)

// p50 returns the median of lat (sorted in place).
func p50(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
}

// echoProgram echoes each byte it reads on a raw terminal, once it said
// READY: the round trip of one keystroke through a program, as in an
// editor.
var echoProgram = []string{"/bin/sh", "-c", "stty raw -echo && printf READY && exec cat"}

// localPTY runs argv on a new local terminal through the test reaper and
// returns the master; the program is killed at cleanup.
func localPTY(b *testing.B, argv []string) (*os.File, <-chan struct{}) {
	master, tty, err := pty.Open()
	if err != nil {
		b.Fatal(err)
	}
	fd := tty.Fd()
	attr := &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}, Sys: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}}
	pid, status, err := testReaper(b).ForkExec(argv[0], argv, attr)
	tty.Close()
	if err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { <-status; close(exited) }()
	b.Cleanup(func() {
		syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
		master.Close()
	})
	return master, exited
}

// readUntil reads r until the bytes read end with want.
func readUntil(r io.Reader, want string) error {
	var got []byte
	buf := make([]byte, 64)
	for !bytes.HasSuffix(got, []byte(want)) {
		n, err := r.Read(buf)
		if err != nil {
			return fmt.Errorf("after %q: %w", got, err)
		}
		got = append(got, buf[:n]...)
	}
	return nil
}

// echoLoop types one byte at a time and waits for it to come back.
func echoLoop(b *testing.B, w io.Writer, r io.Reader) []time.Duration {
	lat := make([]time.Duration, 0, b.N)
	in, out := []byte{0}, make([]byte, 1)
	b.ResetTimer()
	for i := range b.N {
		in[0] = 'a' + byte(i%26)
		start := time.Now()
		if _, err := w.Write(in); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, out); err != nil || out[0] != in[0] {
			b.Fatalf("echo %q of %q: %v", out, in, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
	return lat
}

// BenchmarkPTYEcho is a keystroke's round trip through a program on a
// terminal: through the agent and the SDK, and on a local terminal in
// this process (the baseline).
func BenchmarkPTYEcho(b *testing.B) {
	var local, agent time.Duration
	b.Run("local-pty", func(b *testing.B) {
		master, _ := localPTY(b, echoProgram)
		if err := readUntil(master, "READY"); err != nil {
			b.Fatal(err)
		}
		local = p50(echoLoop(b, master, master))
	})
	b.Run("agent", func(b *testing.B) {
		c := newAgent(b).dial(b, client.Options{})
		p, err := c.PTY(context.Background(), client.PTYOptions{Argv: echoProgram})
		if err != nil {
			b.Fatal(err)
		}
		if err := readUntil(p.Output(), "READY"); err != nil {
			b.Fatal(err)
		}
		agent = p50(echoLoop(b, p, p.Output()))
		p.Signal(context.Background(), client.SIGKILL)
	})
	b.Run("agent-bare-websocket", func(b *testing.B) {
		rawEcho(b, newAgent(b).url)
	})
	if local > 0 {
		b.Logf("p50: agent %v, local %v: %.2fx", agent, local, float64(agent)/float64(local))
	}
}

const ptyThroughputBytes = 256 << 20

// bigFile writes n bytes of the test pattern without newlines (a
// terminal would turn each into two bytes).
func bigFile(b *testing.B, n int) string {
	path := filepath.Join(b.TempDir(), "big")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	line := strings.Repeat(strings.TrimSuffix(pattern, "\n"), 1024)
	for written := 0; written < n; {
		k, err := f.WriteString(line[:min(len(line), n-written)])
		if err != nil {
			b.Fatal(err)
		}
		written += k
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkPTYThroughput cats a 256 MiB file on a terminal: through the
// agent to the SDK, and on a local terminal. The terminal's retention
// buffer is 32 MiB (half the agent's default budget, which a buffer as
// large as the file would exceed); a run fails if anything was dropped,
// so every byte counts.
func BenchmarkPTYThroughput(b *testing.B) {
	file := bigFile(b, ptyThroughputBytes)
	b.Run("local-pty", func(b *testing.B) {
		b.SetBytes(ptyThroughputBytes)
		buf := make([]byte, 256<<10)
		for range b.N {
			master, exited := localPTY(b, []string{"/bin/cat", file})
			total := 0
			for total < ptyThroughputBytes {
				n, err := master.Read(buf)
				total += n
				if err != nil {
					break
				}
			}
			<-exited
			if total != ptyThroughputBytes {
				b.Fatalf("read %d bytes", total)
			}
		}
	})
	b.Run("agent", func(b *testing.B) {
		c := newAgent(b).dial(b, client.Options{})
		ctx := context.Background()
		b.SetBytes(ptyThroughputBytes)
		for range b.N {
			p, err := c.PTY(ctx, client.PTYOptions{Argv: []string{"/bin/cat", file}, Buffer: 32 << 20})
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, p.Output())
			if err != nil || n != ptyThroughputBytes || len(p.Gaps()) != 0 {
				b.Fatalf("read %d bytes: %v, gaps %v", n, err, p.Gaps())
			}
			if _, err := p.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWatchEvent is the time from creating a file to its create
// event: at the SDK through the agent, and from fsnotify in this process.
func BenchmarkWatchEvent(b *testing.B) {
	create := func(b *testing.B, dir string, i int) (string, time.Time) {
		path := filepath.Join(dir, fmt.Sprintf("f%d", i))
		start := time.Now()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
		return path, start
	}
	b.Run("fsnotify", func(b *testing.B) {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		dir := b.TempDir()
		if err := w.Add(dir); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			path, start := create(b, dir, i)
			for ev := range w.Events {
				if ev.Name == path && ev.Has(fsnotify.Create) {
					break
				}
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		reportLatency(b, lat)
	})
	b.Run("agent", func(b *testing.B) {
		c := newAgent(b).dial(b, client.Options{})
		ctx := context.Background()
		dir := b.TempDir()
		w, err := c.Watch(ctx, dir, false)
		if err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			path, start := create(b, dir, i)
			for {
				ev, err := w.Next(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if ev.Path == path && ev.Op == "create" {
					break
				}
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		reportLatency(b, lat)
	})
}

// BenchmarkExecuteRoundTrip runs the cell `x` to its end: through the SDK
// and the agent, and on the same kernel with a bare ZeroMQ client that
// only signs, sends and waits for the reply and the idle status.
func BenchmarkExecuteRoundTrip(b *testing.B) {
	c := newAgent(b).dial(b, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), kernelWait)
	defer cancel()
	k, err := c.StartKernel(ctx, client.KernelOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if ex, err := k.Execute(ctx, "x = 42", client.ExecuteOptions{}); err != nil || ex.Status != client.StatusOK {
		b.Fatalf("setup: %+v %v", ex, err)
	}
	var viaSDK, direct time.Duration
	b.Run("zmq4-direct", func(b *testing.B) {
		d := dialKernel(b, kernelConnection(b, c, k.ID()))
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			d.execute(b, "x")
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		reportLatency(b, lat)
		direct = p50(lat)
	})
	b.Run("sdk", func(b *testing.B) {
		ctx := context.Background()
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			ex, err := k.Execute(ctx, "x", client.ExecuteOptions{})
			if err != nil || ex.Text() != "42" {
				b.Fatalf("%+v %v", ex, err)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		reportLatency(b, lat)
		viaSDK = p50(lat)
	})
	if direct > 0 {
		b.Logf("p50: sdk %v, zmq4 direct %v: %.2fx", viaSDK, direct, float64(viaSDK)/float64(direct))
	}
}
