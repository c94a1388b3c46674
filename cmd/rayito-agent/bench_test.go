package main

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkIdleFootprint builds the static binary, starts it, lets it
// settle and reports its resident memory and its size. It is a benchmark,
// not a test: the numbers go to docs/benchmarks.md.
func BenchmarkIdleFootprint(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "rayito-agent")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	st, _ := os.Stat(bin)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(bin, "serve", "--listen", addr, "--state-dir", filepath.Join(dir, "state"), "--log-level", "error")
		cmd.Env = append(os.Environ(), "RAYITO_ACCESS_TOKEN=bench")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/health")
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("agent did not become healthy")
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		rss := vmRSS(b, cmd.Process.Pid)
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		b.ReportMetric(float64(rss)/1024, "idle_RSS_MiB")
	}
	b.ReportMetric(float64(st.Size())/(1<<20), "binary_MiB")
}

func vmRSS(b *testing.B, pid int) int {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
