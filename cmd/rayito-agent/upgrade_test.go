package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// variantBuilds are agent binaries of this tree with another version, or
// built to fail in an upgrade (handoverFault), each built once.
var variantBuilds sync.Map // name -> *variantBuild

type variantBuild struct {
	once sync.Once
	bin  string
	err  error
}

// agentVariant builds the agent as make build does, with version and
// fault stamped in.
func agentVariant(tb testing.TB, version, fault string) string {
	tb.Helper()
	v, _ := variantBuilds.LoadOrStore(version+"/"+fault, &variantBuild{})
	b := v.(*variantBuild)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "rayito-upgrade-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, "rayito-agent")
		b.err = buildAgent(b.bin, fmt.Sprintf("-X main.version=%s -X main.handoverFault=%s", version, fault))
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.bin
}

// upgradeAgent is an agent process started from bin, with the host's
// client; its log is shown when the test fails.
type upgradeAgent struct {
	*agentProc
	url  string
	host client.Host
}

func startUpgradeAgent(t testing.TB, bin string) *upgradeAgent {
	t.Helper()
	p := startAgentProcFrom(t, bin)
	t.Cleanup(func() {
		if t.Failed() {
			p.mu.Lock()
			t.Logf("the agent's log:\n%s", strings.Join(p.log, "\n"))
			p.mu.Unlock()
		}
	})
	url := "http://" + p.addr
	return &upgradeAgent{agentProc: p, url: url, host: client.Host{URL: url, Token: benchToken}}
}

func (a *upgradeAgent) health(t *testing.T) client.Health {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := a.host.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (a *upgradeAgent) upgrade(t *testing.T, o client.UpgradeOptions) (client.UpgradeAnswer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return a.host.Upgrade(ctx, o)
}

func stepNames(ss []client.PauseStep) string {
	var b []string
	for _, s := range ss {
		b = append(b, s.Step+"="+s.Status)
	}
	return strings.Join(b, " ")
}

// TestUpgradeInPlace: a running agent hands the sandbox to another build
// of this tree and back, in the same process: the instance and the
// generation stay, /health shows the new version and counts the upgrades,
// the traffic counts go on, the host's call is answered on its own
// connection, a repeat of an upgrade_id gets the first answer, and
// clients calling /health all along are all served (a client that
// connects during the swap waits in the backlog). A binary that fails as
// it takes over hands back: the previous agent serves on and says why.
func TestUpgradeInPlace(t *testing.T) {
	binA := agentVariant(t, "0.9.0-a", "")
	binB := agentVariant(t, "0.9.0-b", "")
	binFail := agentVariant(t, "0.9.0-fail", "adopt")
	a := startUpgradeAgent(t, binA)
	// An uptime a new binary's own could not reach in the upgrade.
	time.Sleep(300 * time.Millisecond)
	before := a.health(t)
	if before.Version != "0.9.0-a" || before.Upgrades != 0 {
		t.Fatalf("before: %+v", before)
	}
	pid := a.pid

	// Probes all along: none may fail.
	var probes, failed atomic.Int64
	var firstFail atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 20 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := hc.Get(a.url + "/health")
				if err == nil {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
					if r.StatusCode != 200 {
						err = fmt.Errorf("HTTP %d", r.StatusCode)
					}
				}
				probes.Add(1)
				if err != nil {
					failed.Add(1)
					firstFail.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}

	ans, err := a.upgrade(t, client.UpgradeOptions{Path: binB})
	if err != nil {
		t.Fatalf("upgrade to B: %v (%+v)", err, ans)
	}
	if ans.State != "upgraded" || ans.FromVersion != "0.9.0-a" || ans.ToVersion != "0.9.0-b" {
		t.Fatalf("upgrade to B answered %+v", ans)
	}
	if got, want := stepNames(ans.Steps), "check=done freeze=skipped suspend=done collect=done exec=done adopt=done"; got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	h := a.health(t)
	if h.UptimeMs < before.UptimeMs {
		t.Errorf("uptime %d ms after the upgrade, %d ms before: it looks like a restart", h.UptimeMs, before.UptimeMs)
	}
	if h.Version != "0.9.0-b" || h.Instance != before.Instance || h.ResumeGeneration != before.ResumeGeneration || h.Upgrades != 1 ||
		h.LastUpgrade == nil || h.LastUpgrade.State != "upgraded" {
		t.Fatalf("after the upgrade: %+v (last_upgrade %+v), before %+v", h, h.LastUpgrade, before)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe != binB {
		t.Fatalf("process %d runs %s, want %s (the same process)", pid, exe, binB)
	}

	// Back to A, the binary in the body, under an id: its repeat is
	// answered, not run again.
	bin, err := os.ReadFile(binA)
	if err != nil {
		t.Fatal(err)
	}
	back := client.UpgradeOptions{Binary: bin, UpgradeID: "back-to-a"}
	ans, err = a.upgrade(t, back)
	if err != nil || ans.State != "upgraded" || ans.ToVersion != "0.9.0-a" {
		t.Fatalf("upgrade back to A: %v, %+v", err, ans)
	}
	again, err := a.upgrade(t, back)
	if err != nil || again.UpgradeID != "back-to-a" || again.AtUnixMs != ans.AtUnixMs {
		t.Fatalf("the repeat: %v, %+v; want the first answer %+v", err, again, ans)
	}
	if h := a.health(t); h.Version != "0.9.0-a" || h.Upgrades != 2 || h.Instance != before.Instance {
		t.Fatalf("after the upgrade back: %+v", h)
	}

	// A binary that fails as it takes over hands back.
	ans, err = a.upgrade(t, client.UpgradeOptions{Path: binFail})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != client.CodeInternal || ans.State != "failed" || !strings.Contains(ans.Error, "handed back") {
		t.Fatalf("upgrade to a failing binary: %v, %+v", err, ans)
	}
	if got := stepNames(ans.Steps); !strings.HasSuffix(got, "exec=done adopt=failed") {
		t.Fatalf("the failed upgrade's steps: %s", got)
	}
	close(stop)
	wg.Wait()
	h = a.health(t)
	if h.Version != "0.9.0-a" || h.Upgrades != 2 || h.LastUpgrade == nil || h.LastUpgrade.State != "failed" || h.Instance != before.Instance {
		t.Fatalf("after the failed upgrade: %+v (last_upgrade %+v)", h, h.LastUpgrade)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d /health probes failed across three upgrades: first %v", n, probes.Load(), firstFail.Load())
	}
	t.Logf("%d /health probes across three upgrades, none failed", probes.Load())
}

// TestUpgradeRefusals: what an upgrade refuses, before anything stops;
// the agent serves on, unchanged.
func TestUpgradeRefusals(t *testing.T) {
	binA := agentVariant(t, "0.9.0-a", "")
	binCheck := agentVariant(t, "0.9.0-check", "check")
	a := startUpgradeAgent(t, binA)
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)
	open := filepath.Join(dir, "open")
	b, _ := os.ReadFile(binA)
	os.WriteFile(open, b, 0o755)
	os.Chmod(open, 0o777)
	wrong := sha256.Sum256([]byte("another binary"))
	for _, c := range []struct {
		name string
		o    client.UpgradeOptions
		code client.Code
		want string
	}{
		{"a script", client.UpgradeOptions{Path: script}, client.CodeBadRequest, "not an ELF file"},
		{"writable by others", client.UpgradeOptions{Path: open}, client.CodeBadRequest, "writable by others"},
		{"a wrong checksum", client.UpgradeOptions{Path: binA, SHA256: hex.EncodeToString(wrong[:])}, client.CodeBadRequest, "its SHA-256 is"},
		{"a relative path", client.UpgradeOptions{Path: "rayito-agent"}, client.CodeBadRequest, "absolute path"},
		{"a missing binary", client.UpgradeOptions{Path: filepath.Join(dir, "none")}, client.CodeBadRequest, "no such file"},
		{"a binary that cannot say what it is", client.UpgradeOptions{Path: binCheck}, client.CodeBadRequest, "not a version and formats"},
		{"a deadline too short", client.UpgradeOptions{Path: binA, DeadlineMs: 10}, client.CodeBadRequest, "deadline_ms must be"},
	} {
		_, err := a.upgrade(t, c.o)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != c.code || !strings.Contains(ce.Message, c.want) {
			t.Errorf("%s: %v, want %s saying %q", c.name, err, c.code, c.want)
		}
	}
	// Without the token.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := (client.Host{URL: a.url}).Upgrade(ctx, client.UpgradeOptions{Path: binA}); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("without the token: %v", err)
	}
	// What this version cannot carry yet: refused, nothing stops.
	c, err := client.Dial(ctx, strings.Replace(a.url, "http://", "ws://", 1), client.Options{Token: benchToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Signal(ctx, client.SIGKILL)
	_, err = a.upgrade(t, client.UpgradeOptions{Path: binA})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != client.CodeConflict || !strings.Contains(ce.Message, "streams") {
		t.Errorf("with a command running: %v, want conflict naming the streams", err)
	}
	if h := a.health(t); h.Version != "0.9.0-a" || h.Upgrades != 0 || h.LastUpgrade != nil {
		t.Errorf("after the refusals: %+v (last_upgrade %+v)", h, h.LastUpgrade)
	}
}
