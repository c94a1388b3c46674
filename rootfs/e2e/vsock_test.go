package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// vsockURL is the agent in the guest as the guest itself reaches it over
// vsock: the loopback transport's CID 1, the image's vsock port.
const vsockURL = "vsock://1:49983"

// TestVsockInGuest: inside the VM, the agent's own CLI reaches the agent
// over vsock (loopback, CID 1) and runs a command, a terminal, a watch
// and a cell; across a snapshot and restore its vsock connection is cut
// like a TCP one and the CLI reattaches without losing a line.
func TestVsockInGuest(t *testing.T) {
	tv := vmConfig(t)
	orig := bootHealthy(t, tv.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := dial(t, ctx, orig.AgentURL(), tv.token, client.Options{ReconnectTimeout: restoreTimeout + time.Minute})
	g := guest{c}
	cli := func(script string) string {
		t.Helper()
		out, err := g.exec(ctx, client.ExecOptions{
			Argv: []string{"/bin/sh", "-c", script},
			Env:  map[string]string{"RAYITO_ACCESS_TOKEN": tv.token, "URL": vsockURL},
		}, nil)
		if err != nil || out.status.ExitCode() != 0 {
			t.Fatalf("in the guest: %s: %v %s\nstdout %q\nstderr %q", script, err, out.status, out.stdout, out.stderr)
		}
		return out.stdout
	}
	if out := cli(`rayito-agent exec --url $URL -- echo over vsock`); out != "over vsock\n" {
		t.Fatalf("exec over vsock: %q", out)
	}
	if out := cli(`printf 'echo pty-$((6*7))\nexit\n' | rayito-agent pty --url $URL -- /bin/sh`); !strings.Contains(out, "pty-42") {
		t.Fatalf("a terminal over vsock: %q", out)
	}
	out := cli(`mkdir -p /tmp/w; rayito-agent watch --url $URL /tmp/w > /tmp/w.log 2>&1 & pid=$!
		sleep 2; touch /tmp/w/seen; sleep 2; kill -INT $pid; wait $pid; cat /tmp/w.log`)
	if !strings.Contains(out, "/tmp/w/seen") {
		t.Fatalf("a watch over vsock: %q", out)
	}
	if out := cli(`rayito-agent run-code --url $URL 'print(6*7)'`); !strings.Contains(out, "42") {
		t.Fatalf("a cell over vsock: %q", out)
	}

	// A host listener on vsock takes the host's connections alone: the
	// guest's own programs reach neither it (vsock_loopback, CID 1) nor
	// the routes it took off the sandbox's listener. A second agent in
	// the guest, started as an image would start one with --host-listen.
	cli(`setsid rayito-agent serve --listen 127.0.0.1:50001 --host-listen vsock://:50002 --state-dir /tmp/second --cgroups=false --pause-whole-vm=false --lifecycle-file=off --hooks-dir=/nonexistent > /tmp/second.log 2>&1 < /dev/null &`)
	waitFor(t, ctx, g, `grep -q '"serving the host' /tmp/second.log`)
	out = cli(`rayito-agent pause --abort --url http://127.0.0.1:50001 2>&1; echo; rayito-agent health --url vsock://1:50002 2>&1; echo; cat /tmp/second.log`)
	if !strings.Contains(out, "--host-listen") || !strings.Contains(out, "the host listener refused a connection that is not the host's") {
		t.Fatalf("the guest reached the host's routes:\n%s", out)
	}
	cli(`pkill -f 'host-listen vsock://[:]50002'; true`)

	// A command followed by the CLI over vsock across a snapshot: 100
	// lines, 0.2 s apart; the CLI runs detached in the guest and writes
	// what it got to a file.
	cli(`setsid sh -c 'rayito-agent exec --url $URL -- sh -c "for i in \$(seq 1 100); do echo \$i; sleep 0.2; done" > /tmp/seq.out 2> /tmp/seq.err; echo $? > /tmp/seq.done' < /dev/null > /dev/null 2>&1 &`)
	waitFor(t, ctx, g, `[ "$(wc -l < /tmp/seq.out)" -ge 5 ]`)
	snap := t.TempDir()
	snapshot(t, orig, snap)
	c.Close()
	orig.Close()
	v, _ := restoreHealthy(t, t, tv.cfg, snap)
	rctx := opContext(t)
	if _, err := (client.Host{URL: v.AgentURL(), Token: tv.token}).Resume(rctx, client.ResumeOptions{ResumeID: "vsock"}); err != nil {
		t.Fatal(err)
	}
	rc := dial(t, ctx, v.AgentURL(), tv.token, client.Options{})
	rg := guest{rc}
	waitFor(t, ctx, rg, `[ -s /tmp/seq.done ]`)
	got, err := rg.run(ctx, "/bin/sh", "-c", "cat /tmp/seq.done /tmp/seq.err; echo ---; cat /tmp/seq.out")
	if err != nil {
		t.Fatal(err)
	}
	status, lines, _ := strings.Cut(got, "---\n")
	var want strings.Builder
	for i := 1; i <= 100; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if lines != want.String() || !strings.HasPrefix(status, "0\n") {
		t.Fatalf("the CLI over vsock across a restore: status and stderr %q; lines %q", status, lines)
	}
}

// waitFor polls a shell condition in the guest until it holds.
func waitFor(t *testing.T, ctx context.Context, g guest, cond string) {
	t.Helper()
	for {
		if _, err := g.sh(ctx, cond); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never true in the guest: %s", cond)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestVsockFromHost: the host reaches the agent over a real vsock device.
// It needs /dev/vhost-vsock on the machine that runs QEMU, which a VM such
// as this project's build machine (itself a Firecracker guest) lacks.
func TestVsockFromHost(t *testing.T) {
	if _, err := os.Stat("/dev/vhost-vsock"); err != nil {
		t.Skipf("no /dev/vhost-vsock here (%v): QEMU cannot give the guest a vsock device on this machine; run where the host has vhost_vsock loaded", err)
	}
	tv := vmConfig(t)
	tv.cfg.VsockCID = 42
	bootHealthy(t, tv.cfg)
	ctx := opContext(t)
	c := dial(t, ctx, "vsock://42:49983", tv.token, client.Options{})
	out, err := guest{c}.run(ctx, "echo", "from the host over vsock")
	if err != nil || out != "from the host over vsock\n" {
		t.Fatalf("%q %v", out, err)
	}
}
