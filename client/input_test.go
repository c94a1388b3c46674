package client_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// feedThroughCuts writes data to w in random slices while the proxy cuts
// the connection cuts times at random points of the stream (and loses
// what the client sends for a moment now and then, as a dying route
// would), waiting for each reconnect.
func feedThroughCuts(t *testing.T, proxy *tcpProxy, reconnects *atomic.Int32, data []byte, cuts int, write func([]byte) error, seed int64) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	next := make([]int, cuts)
	for i := range next {
		next[i] = rng.Intn(len(data))
	}
	sortInts(next)
	sent := 0
	for sent < len(data) {
		n := min(1+rng.Intn(96<<10), len(data)-sent)
		if err := write(data[sent : sent+n]); err != nil {
			t.Fatalf("write at %d: %v", sent, err)
		}
		sent += n
		for len(next) > 0 && next[0] <= sent {
			next = next[1:]
			if rng.Intn(8) == 0 {
				proxy.swallow.Store(true)
				time.Sleep(time.Millisecond)
				proxy.swallow.Store(false)
			}
			proxy.cutAndWait(t, reconnects)
		}
	}
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// TestStdinSurvivesCuts: 64 MiB of random bytes into sha256sum while the
// connection is cut 1,000 times at random points: every byte reaches the
// program once and in order, and the end of input comes after them.
func TestStdinSurvivesCuts(t *testing.T) {
	a := newAgent(t)
	proxy := newTCPProxy(t, strings.TrimPrefix(a.url, "ws://"))
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxCuts(t)
	data := randomBytes(64<<20, 11)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sha256sum"}, Stdin: true})
	must(t, err)
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(p.Stdout())
		out <- string(b)
	}()
	feedThroughCuts(t, proxy, &reconnects, data, 1000, func(b []byte) error { _, err := p.Write(b); return err }, 1)
	must(t, p.CloseStdin(ctx))
	st, err := p.Wait(ctx)
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("sha256sum: %v %v", st, err)
	}
	sum := sha256.Sum256(data)
	if got := <-out; !strings.HasPrefix(got, hex.EncodeToString(sum[:])) {
		t.Fatalf("sha256sum read something else than was sent: %q, want %x (%d reconnects)", got, sum, reconnects.Load())
	}
	if reconnects.Load() < 1000 {
		t.Fatalf("%d reconnects, want 1000", reconnects.Load())
	}
}

// TestPTYInputSurvivesCuts: keystroke-sized writes into a terminal in raw
// mode whose program copies them to a file, across 1,000 cuts: the file is
// what was typed.
func TestPTYInputSurvivesCuts(t *testing.T) {
	a := newAgent(t)
	proxy := newTCPProxy(t, strings.TrimPrefix(a.url, "ws://"))
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxCuts(t)
	file := filepath.Join(t.TempDir(), "typed")
	rng := rand.New(rand.NewSource(5))
	typed := make([]byte, 256<<10)
	for i := range typed {
		typed[i] = byte(32 + rng.Intn(95)) // printable: no terminal control
	}
	p, err := c.PTY(ctx, client.PTYOptions{Argv: []string{"sh", "-c", "stty raw -echo && echo ready && head -c " + strconv.Itoa(len(typed)) + " > " + file}})
	must(t, err)
	if err := readUntil(p.Output(), "ready\n"); err != nil { // raw mode is on
		t.Fatal(err)
	}
	go io.Copy(io.Discard, p.Output())
	rng2 := rand.New(rand.NewSource(6))
	write := func(b []byte) error {
		for len(b) > 0 { // keystroke-sized
			n := min(1+rng2.Intn(16), len(b))
			if _, err := p.Write(b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
		return nil
	}
	feedThroughCuts(t, proxy, &reconnects, typed, 1000, write, 2)
	st, err := p.Wait(ctx)
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("the terminal's program: %v %v", st, err)
	}
	got, _ := os.ReadFile(file)
	if string(got) != string(typed) {
		t.Fatalf("the terminal got %d bytes, %d typed; first difference at %d", len(got), len(typed), firstDiff(got, typed))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestInputReplyAcrossResume: a cell waiting in input() when the sandbox
// is resumed gets the reply sent after the resume, once.
func TestInputReplyAcrossResume(t *testing.T) {
	a := newAgent(t)
	var reconnects atomic.Int32
	c := a.dial(t, client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxKernel(t)
	k, err := c.StartKernel(ctx, client.KernelOptions{})
	must(t, err)
	cell, err := k.Run(ctx, "name = input('name? ')\nprint('hello ' + name)", client.ExecuteOptions{AllowStdin: true})
	must(t, err)
	for {
		ev, err := cell.Next(ctx)
		must(t, err)
		if ev.Type == "input_request" {
			break
		}
	}
	if _, err := (client.Host{URL: a.url, Token: testToken}).Resume(ctx, client.ResumeOptions{ResumeID: "input"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the client reconnected", func() bool { return reconnects.Load() > 0 })
	must(t, cell.Reply(ctx, "ada"))
	ex, err := cell.Wait(ctx)
	if err != nil || ex.Stdout != "hello ada\n" || ex.Status != "ok" {
		t.Fatalf("after the resume: %+v %v", ex, err)
	}
	if err := cell.Reply(ctx, "again"); !client.HasCode(err, client.CodeConflict) {
		t.Fatalf("a second reply: %v, want conflict", err)
	}
}
