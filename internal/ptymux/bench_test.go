package ptymux_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
)

// echoer puts its terminal in raw mode and echoes every byte itself, as an
// editor or readline does: one keystroke is one round trip.
var echoer = []string{"/bin/sh", "-c", "stty raw -echo; echo ready; exec cat"}

// BenchmarkKeystrokeEcho measures a keystroke's round trip: through the
// manager (input queue, master, program, pump, stream log, attachment)
// against a pty the benchmark drives itself with plain reads and writes.
func BenchmarkKeystrokeEcho(b *testing.B) {
	b.Run("manager", func(b *testing.B) {
		tm := start(b, newManager(b), ptymux.Options{Argv: echoer})
		tm.waitFor("ready\n")
		ctx := context.Background()
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			want := tm.cursor + 1
			tm.typ("k")
			for tm.cursor < want {
				if _, err := tm.read(ctx); err != nil {
					b.Fatal(err)
				}
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		reportLatency(b, lat)
	})

	b.Run("local", func(b *testing.B) {
		master, stop := startLocal(b, echoer)
		defer stop()
		r := bufio.NewReader(master)
		if _, err := r.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		key, echo := []byte("k"), make([]byte, 1)
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if _, err := master.Write(key); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(r, echo); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		reportLatency(b, lat)
	})
}

// startLocal runs argv on a pty of its own, outside the manager, and
// returns the master and a stop that hangs the pty up and waits for the
// exit (never kill by pid: once reaped, the pid may be someone else's).
func startLocal(b *testing.B, argv []string) (master *os.File, stop func()) {
	master, slave, err := pty.Open()
	if err != nil {
		b.Fatal(err)
	}
	fd := slave.Fd()
	_, exit, err := reaper.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   append(os.Environ(), "TERM=xterm-256color"),
		Files: []uintptr{fd, fd, fd},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0},
	})
	slave.Close()
	if err != nil {
		master.Close()
		b.Fatal(err)
	}
	return master, func() {
		master.Close()
		<-exit
	}
}

// reportLatency reports the median and the 99th percentile round trip.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p int) float64 { return float64(lat[(len(lat)-1)*p/100].Nanoseconds()) }
	b.ReportMetric(pct(50), "p50-ns")
	b.ReportMetric(pct(99), "p99-ns")
}

// BenchmarkOutputThroughput measures `cat` of a 256 MiB file in a PTY:
// through the manager, read by a client through an attachment with the
// default window and buffer, and on a pty the benchmark reads itself.
// gap-B/op is what the client lost because it fell behind (drop policy).
func BenchmarkOutputThroughput(b *testing.B) {
	const size = 256 << 20
	file := filepath.Join(b.TempDir(), "big")
	line := append(bytes.Repeat([]byte("x"), 1023), '\n')
	if err := os.WriteFile(file, bytes.Repeat(line, size/len(line)), 0o644); err != nil {
		b.Fatal(err)
	}
	argv := []string{"/bin/cat", file}

	b.Run("manager", func(b *testing.B) {
		m := newManager(b)
		ctx := context.Background()
		buf := make([]byte, 0, 1<<20)
		var lost uint64
		b.SetBytes(size)
		for range b.N {
			s, err := m.Start(ptymux.Options{Argv: argv})
			if err != nil {
				b.Fatal(err)
			}
			a, err := s.Attach(nil, stream.DefaultWindow)
			if err != nil {
				b.Fatal(err)
			}
			for {
				it, err := a.Next(ctx, buf[:0], cap(buf))
				if errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					b.Fatal(err)
				}
				switch it.Kind {
				case stream.ItemData:
					a.Ack(map[string]uint64{ptymux.Channel: it.Offset + uint64(len(it.Data))})
				case stream.ItemGap:
					lost += it.To - it.From
					a.Ack(map[string]uint64{ptymux.Channel: it.To})
				case stream.ItemEnd:
					if it.End.ExitCode == nil || *it.End.ExitCode != 0 {
						b.Fatalf("cat ended %+v", it.End)
					}
				}
			}
			a.Close()
		}
		b.ReportMetric(float64(lost)/float64(b.N), "gap-B/op")
	})

	b.Run("local", func(b *testing.B) {
		buf := make([]byte, 1<<20)
		b.SetBytes(size)
		for range b.N {
			master, stop := startLocal(b, argv)
			n := 0
			for {
				k, err := master.Read(buf)
				n += k
				if err != nil {
					break // EIO: cat exited
				}
			}
			stop()
			if n < size {
				b.Fatalf("read %d bytes of %d", n, size)
			}
		}
	})
}
