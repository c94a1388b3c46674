package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
)

// reportWait is how long a test waits after a pause that shrank memory
// before it snapshots: the guest's free page reporting hands freed 2 MiB
// blocks to the host 2 s after they are freed (the kernel's
// PAGE_REPORTING_DELAY), and the host then drops them from the snapshot.
const reportWait = 4 * time.Second

// pauseTestTimeout bounds a pause test's calls: 300 MiB written and two
// snapshots of a 1 GiB VM take minutes under software emulation.
const pauseTestTimeout = 10 * time.Minute

func pauseContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), pauseTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// quiesce is the host's POST /v1/pause before a snapshot; every step must
// be done, the freeze included (the image isolates user work).
func quiesce(t *testing.T, ctx context.Context, v *vm.VM, token string, o client.PauseOptions) client.PauseAnswer {
	t.Helper()
	if o.DeadlineMs == 0 {
		// Software emulation: what takes milliseconds takes longer here.
		o.DeadlineMs = 30000
	}
	a, err := client.Host{URL: v.AgentURL(), Token: token}.Pause(ctx, o)
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	for _, s := range a.Steps {
		if s.Status != "done" {
			t.Errorf("pause step %s: %s (%s)", s.Step, s.Status, s.Detail)
		}
	}
	if _, ok := a.Step("freeze"); !ok || a.State != "paused" {
		t.Errorf("pause: %+v", a)
	}
	return a
}

// TestPauseFreezesUserWork: between the pause's answer and the thaw no
// user process runs, and the first thing a user process sees after the
// thaw is the clock the resume set: a command printing the wall clock
// every 10 ms prints nothing in between, and its next line is after the
// host's time. The VM is stopped and continued in between, as a host
// would pause it.
func TestPauseFreezesUserWork(t *testing.T) {
	tv := vmConfig(t)
	v := bootHealthy(t, tv.cfg)
	ctx := pauseContext(t)
	c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{})
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", "while :; do date +%s%N; sleep 0.01; done"}})
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan int64, 1<<16)
	go func() {
		sc := bufio.NewScanner(p.Stdout())
		for sc.Scan() {
			if n, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
				lines <- n
			}
		}
		close(lines)
	}()
	for range 20 {
		<-lines
	}
	a := quiesce(t, ctx, v, tv.token, client.PauseOptions{})
	frozenBy := time.UnixMilli(a.AtUnixMs).Add(time.Duration(a.DurationMs * float64(time.Millisecond)))
	if err := v.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := v.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	stepped := time.Now().Add(time.Hour)
	h, err := client.Host{URL: v.AgentURL(), Token: tv.token}.Resume(ctx, client.ResumeOptions{ResumeID: "freeze", TimeUnixNs: stepped.UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if h.LastResume == nil || h.LastResume.PausedMs == nil || h.LastPause == nil || h.LastPause.Ended != "resume" {
		t.Errorf("the resume after the pause: last_resume %+v, last_pause %+v", h.LastResume, h.LastPause)
	}
	var before, after, between int
	deadline := time.After(opTimeout)
	for after < 20 {
		select {
		case n, ok := <-lines:
			if !ok {
				t.Fatal("the printing command ended")
			}
			switch at := time.Unix(0, n); {
			case at.Before(frozenBy):
				before++
			case !at.Before(stepped):
				after++
			default:
				between++
				t.Errorf("a user process ran between the freeze (%s) and the stepped clock (%s): it printed %s", frozenBy, stepped, at)
			}
		case <-deadline:
			t.Fatalf("after the thaw: %d lines after the stepped clock", after)
		}
	}
	t.Logf("%d lines before the freeze, %d between, then %d after the stepped clock", before+20, between, after)
	p.Signal(ctx, client.SIGKILL)
}

// TestPauseShrinksSnapshot: a sandbox that read 300 MiB of files holds
// them in its page cache; a pause with shrink cache drops it, the guest
// reports the freed memory to the host (virtio-balloon free page
// reporting), and the snapshot leaves it out. Both snapshots are of one
// VM in one run; their sizes, save and restore times go to the timings.
func TestPauseShrinksSnapshot(t *testing.T) {
	tv := vmConfig(t)
	tv.cfg.MemoryMiB = 1024
	v := bootHealthy(t, tv.cfg)
	ctx := pauseContext(t)
	c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{})
	g := guest{c}
	// Written by the sandbox, then read back: 300 MiB of page cache that
	// does not compress to zero pages.
	if _, err := g.sh(ctx, "dd if=/dev/urandom of=/root/data bs=1M count=300 status=none && sync && cat /root/data > /dev/null"); err != nil {
		t.Fatal(err)
	}
	host := client.Host{URL: v.AgentURL(), Token: tv.token}
	sizes := map[string]int64{}
	for i, shrink := range []string{"none", "all"} {
		a := quiesce(t, ctx, v, tv.token, client.PauseOptions{Shrink: shrink})
		t.Logf("pause shrink %s: MemAvailable %d MiB before, %d MiB after", shrink, a.MemAvailableBefore>>20, a.MemAvailableAfter>>20)
		if s, ok := a.Step("shrink"); ok {
			t.Logf("pause shrink %s: %s", shrink, s.Detail)
		}
		time.Sleep(reportWait)
		dir := t.TempDir()
		started := time.Now()
		if err := v.Snapshot(ctx, dir); err != nil {
			t.Fatal(err)
		}
		saved := time.Since(started)
		st, err := os.Stat(filepath.Join(dir, "state"))
		if err != nil {
			t.Fatal(err)
		}
		sizes[shrink] = st.Size()
		timings.add(t, "pause shrink "+shrink+": snapshot save (1 GiB VM, 300 MiB read)", saved)
		timings.addValue(t, "pause shrink "+shrink+": snapshot size", mib(st.Size()))
		r, restored := restoreHealthy(t, t, tv.cfg, dir)
		timings.add(t, "pause shrink "+shrink+": restore to /health 200", time.Since(restored))
		r.Close()
		if i == 0 {
			if err := v.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := host.Resume(ctx, client.ResumeOptions{ResumeID: "after-none"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("snapshot sizes: shrink none %s, shrink cache %s", mib(sizes["none"]), mib(sizes["cache"]))
	if sizes["cache"] > sizes["none"]/2 {
		t.Errorf("the snapshot after shrink cache is %s, more than half the %s without", mib(sizes["cache"]), mib(sizes["none"]))
	}
}

// TestPauseFilesystemColdBoot: a sandbox writes a file and is paused with
// mode filesystem; the host keeps the disk alone and boots it cold. The
// file is there, whole, though it was written a moment before the pause.
func TestPauseFilesystemColdBoot(t *testing.T) {
	tv := vmConfig(t)
	v := bootHealthy(t, tv.cfg)
	ctx := pauseContext(t)
	g := guest{dial(t, ctx, v.AgentURL(), tv.token, client.Options{})}
	sum, err := g.sh(ctx, "head -c 8388608 /dev/urandom > /root/fresh && sha256sum /root/fresh")
	if err != nil {
		t.Fatal(err)
	}
	a := quiesce(t, ctx, v, tv.token, client.PauseOptions{Mode: "filesystem"})
	if s, _ := a.Step("fsfreeze"); !strings.Contains(s.Detail, "/") {
		t.Errorf("fsfreeze: %+v", s)
	}
	snap := t.TempDir()
	if err := v.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	v.Close()
	// Only the disk goes on: flattened onto a raw image, booted cold.
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if out, err := exec.CommandContext(ctx, vm.QEMUImg, "convert", "-O", "raw", filepath.Join(snap, "disk.qcow2"), disk).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v: %s", err, out)
	}
	cold := tv.cfg
	cold.Image = disk
	v2 := bootHealthy(t, cold)
	g2 := guest{dial(t, ctx, v2.AgentURL(), tv.token, client.Options{})}
	if got, err := g2.run(ctx, "sha256sum", "/root/fresh"); err != nil || got != sum {
		t.Errorf("after a cold boot from the disk: %q, %v; want %q", got, err, sum)
	}
}
