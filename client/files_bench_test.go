package client_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
)

// transferSize is what each transfer benchmark moves per iteration.
const transferSize = 1 << 30

// benchFile writes a file of random bytes of the given size.
func benchFile(b testing.TB, path string, size int64) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	rand.Read(block)
	for off := int64(0); off < size; off += int64(len(block)) {
		if _, err := f.Write(block[:min(int64(len(block)), size-off)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFileTransfer moves 1 GiB per iteration between two files of
// the same disk (a directory in the system's temporary one, open to
// anyone) through the agent, and
// through the baselines, in one run:
//
//   - tcp-copy: the file sent over a loopback TCP connection (sendfile)
//     into a file, the raw cost of the bytes crossing a socket;
//   - cp: the cp command on the same disk; "+fsync" variants sync the
//     copy as the agent's upload does before its commit;
//   - ws-download, ws-upload: the Go client's Open and Create;
//   - http-download, http-upload: GET and PUT /v1/files;
//   - http-upload-nobody: the same PUT as nobody (when run as root).
//
// Run with -benchtime 1x or 3x; compare the MB/s of one run.
// RAYITO_BENCH_DIR picks another disk (such as a tmpfs) than the
// temporary directory's.
func BenchmarkFileTransfer(b *testing.B) {
	dst, paths := transferPaths(b)
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			b.SetBytes(transferSize)
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				os.Remove(dst)
				before := cpuTime()
				b.StartTimer()
				if err := p.run(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += cpuTime() - before
				b.StartTimer()
			}
			b.StopTimer()
			// CPU time says what a path costs whatever else runs on the
			// machine; throughput alone depends on the load.
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/GiB")
			checkCopy(b, dst)
		})
	}
}

// BenchmarkFileTransferTurns runs the same paths taking turns, one
// transfer of each per round (-benchtime Nx: N rounds), and reports each
// path's median rate and its median ratio to the TCP copy of the same
// round: the TCP copy's own rate swings by 2x between runs on this
// machine, so ratios taken a few seconds apart are steadier than ratios of
// rates measured minutes apart.
//
//	go test -run '^$' -bench FileTransferTurns -benchtime 5x ./client/
func BenchmarkFileTransferTurns(b *testing.B) {
	dst, paths := transferPaths(b)
	rates := make([][]float64, len(paths))
	for range b.N {
		for i, p := range paths {
			os.Remove(dst)
			start := time.Now()
			if err := p.run(); err != nil {
				b.Fatal(err)
			}
			rates[i] = append(rates[i], transferSize/1e6/time.Since(start).Seconds())
			checkCopy(b, dst)
		}
	}
	b.StopTimer()
	for i, p := range paths {
		b.ReportMetric(medianOf(rates[i]), p.name+"-MB/s")
		if i == 0 {
			continue
		}
		ratios := make([]float64, b.N)
		for r := range ratios {
			ratios[r] = rates[i][r] / rates[0][r]
		}
		b.ReportMetric(medianOf(ratios), p.name+"/tcp-copy")
	}
	b.ReportMetric(0, "ns/op")
}

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func checkCopy(b *testing.B, dst string) {
	if st, err := os.Stat(dst); err != nil || st.Size() != transferSize {
		b.Fatalf("copy has %v bytes: %v", st, err)
	}
}

type transferPath struct {
	name string
	run  func() error
}

// transferPaths starts an agent and returns the transfer benchmarks'
// paths, the TCP copy first, and the file each writes. RAYITO_BENCH_DIR
// picks another disk (such as a tmpfs) than the temporary directory's.
func transferPaths(b *testing.B) (dst string, paths []transferPath) {
	a := newAgent(b)
	c := a.dial(b, client.Options{})
	// Open to anyone, for the uploads as nobody.
	dir, err := os.MkdirTemp(cmp.Or(os.Getenv("RAYITO_BENCH_DIR"), os.TempDir()), "bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		b.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	benchFile(b, src, transferSize)
	dst = filepath.Join(dir, "dst")
	base := "http" + strings.TrimPrefix(a.url, "ws")
	ctx := context.Background()
	run := func(name string, fn func() error) { paths = append(paths, transferPath{name, fn}) }
	run("tcp-copy", func() error { return tcpCopy(src, dst, false) })
	run("tcp-copy+fsync", func() error { return tcpCopy(src, dst, true) })
	// Through the reaper: this process runs one (the agent's managers).
	r := testReaper(b)
	command := func(argv ...string) error {
		_, err := proctest.Run(r, argv...)
		return err
	}
	run("cp", func() error { return command("cp", src, dst) })
	run("cp+fsync", func() error {
		if err := command("cp", src, dst); err != nil {
			return err
		}
		return command("sync", dst)
	})
	run("ws-download", func() error {
		r, err := c.Files().Open(ctx, src)
		if err != nil {
			return err
		}
		defer r.Close()
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = r.WriteTo(f)
		return err
	})
	run("ws-upload", func() error {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		w, err := c.Files().Create(ctx, dst, client.WriteOptions{})
		if err != nil {
			return err
		}
		if _, err := w.ReadFrom(f); err != nil {
			return err
		}
		return w.Close()
	})
	run("http-download", func() error {
		req, _ := http.NewRequest("GET", base+"/v1/files?"+url.Values{"path": {src}}.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		defer f.Close()
		// As a download tool would, with a buffer of 1 MiB, not io.Copy's
		// 32 KiB (a file's ReadFrom copies through 32 KiB from a body):
		// the raw TCP copy it is compared with splices, with no buffer.
		_, err = io.CopyBuffer(struct{ io.Writer }{f}, resp.Body, make([]byte, 1<<20))
		return err
	})
	httpUpload := func(user string) error {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		req, _ := http.NewRequest("PUT", base+"/v1/files?"+url.Values{"path": {dst}, "user": {user}}.Encode(), f)
		req.ContentLength = transferSize
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			return &client.Error{Code: client.CodeInternal, Message: "PUT answered " + strconv.Itoa(resp.StatusCode)}
		}
		return nil
	}
	run("http-upload", func() error { return httpUpload("") })
	if os.Geteuid() == 0 {
		// Every write of an upload as another user switches a thread to
		// the user and back (files.Writer).
		run("http-upload-nobody", func() error { return httpUpload("nobody") })
	}
	return dst, paths
}

// cpuTime is the CPU time used so far by this process (client and agent
// alike) and by its waited-for children (cp).
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	total := time.Duration(0)
	for _, tv := range []syscall.Timeval{self.Utime, self.Stime, children.Utime, children.Stime} {
		total += time.Duration(tv.Nano())
	}
	return total
}

// tcpCopy sends src over a loopback TCP connection into dst.
func tcpCopy(src, dst string, sync bool) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	sent := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			sent <- err
			return
		}
		defer conn.Close()
		f, err := os.Open(src)
		if err != nil {
			sent <- err
			return
		}
		defer f.Close()
		_, err = io.Copy(conn, f)
		sent <- err
	}()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return err
	}
	defer conn.Close()
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(f, conn); err != nil {
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return <-sent
}

// BenchmarkStatRoundTrip is 1,000 stats per iteration through the Go
// client (as the agent's own user, and as nobody, whose identity a thread
// borrows for each), against plain websocket requests (list, answered on
// the connection's reader) and local lstat calls. The four take turns
// call by call, so a ratio compares calls made under the same load.
func BenchmarkStatRoundTrip(b *testing.B) {
	a := newAgent(b)
	c := a.dial(b, client.Options{})
	dir := b.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("x"), 0o644)
	ctx := context.Background()
	paths := []struct {
		name string
		fn   func() error
	}{
		{"lstat", func() error { _, err := os.Lstat(p); return err }},
		{"ws", func() error { _, err := c.List(ctx, "none"); return err }},
		{"stat", func() error { _, err := c.Files().Stat(ctx, p); return err }},
		{"nobody", func() error { _, err := c.Files().As("nobody").Stat(ctx, p); return err }},
	}
	lat := make([][]time.Duration, len(paths))
	for range b.N {
		for range 1000 {
			for i, path := range paths {
				start := time.Now()
				if err := path.fn(); err != nil {
					b.Fatal(err)
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(paths))
	for i, path := range paths {
		slices.Sort(lat[i])
		p50[i] = float64(lat[i][len(lat[i])/2].Nanoseconds()) / 1e3
		b.ReportMetric(p50[i], path.name+"-p50-µs")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100].Nanoseconds())/1e3, path.name+"-p99-µs")
	}
	b.ReportMetric(p50[2]/p50[1], "stat/ws")
	b.ReportMetric(p50[3]/p50[1], "nobody/ws")
}
