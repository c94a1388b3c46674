package e2e

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
)

// holdConnections is a guest program that holds a TCP connection to the
// host (QEMU's user network reaches the host's loopback at 10.0.2.2) and
// one over the guest's loopback, each waiting in a read; when a read
// returns, it writes how (and when) to /tmp/conn-NAME.
const holdConnections = `
import signal, socket, sys, threading, time
r = socket.create_connection(("10.0.2.2", int(sys.argv[1])))
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
l = socket.create_connection(srv.getsockname()); peer, _ = srv.accept()
def wait(name, s):
    try:
        res = "eof" if not s.recv(1) else "data"
    except OSError as e:
        res = "error " + (e.strerror or str(e))
    with open("/tmp/conn-" + name, "w") as f:
        f.write(res + " " + repr(time.time()))
threading.Thread(target=wait, args=("remote", r)).start()
threading.Thread(target=wait, args=("loopback", l)).start()
# SIGUSR1: a byte over the loopback connection, to show it still works.
signal.signal(signal.SIGUSR1, lambda *a: peer.send(b"x"))
print("ready", flush=True)
while True:
    time.sleep(86400)
`

// cloneHook is a post-clone hook: a token of its own per clone, and what
// it was told.
const cloneHook = `#!/bin/sh
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > /run/clone-token
echo "$RAYITO_EVENT $RAYITO_SANDBOX_ID $RAYITO_CLONE $RAYITO_RESUME_GENERATION" > /run/clone-env
`

// TestLifecycleAcrossClones: a guest program holds a TCP connection to a
// server on the host, opened before the snapshot; in each of three clones
// the connection is reset before user work thaws, so the program's
// blocked read returns an error at once (it hung before), a post-clone
// hook has written a token of its own before the resume answered,
// /etc/machine-id differs, and the host's network facts are applied (a
// name server) and the address announced. Then, in one clone, a plain resume after 5 s
// resets nothing and keeps the loopback connection, and a post-resume
// hook that sleeps past its timeout is killed and reported.
func TestLifecycleAcrossClones(t *testing.T) {
	tv := vmConfig(t)
	orig := bootHealthy(t, tv.cfg)
	ctx := pauseContext(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- cn // held, never written to
		}
	}()
	c := dial(t, ctx, orig.AgentURL(), tv.token, client.Options{})
	g := guest{c}
	if _, err := g.run(ctx, "mkdir", "-p", "/etc/rayito/hooks/post-clone.d", "/etc/rayito/hooks/post-resume.d"); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteFile(ctx, "/etc/rayito/hooks/post-clone.d/10-token", []byte(cloneHook)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.run(ctx, "chmod", "755", "/etc/rayito/hooks/post-clone.d/10-token"); err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"python3", "-c", holdConnections, strconv.Itoa(port)}})
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(p.Stdout()).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the connection holder: %q, %v", line, err)
	}
	select {
	case <-accepted:
	case <-ctx.Done():
		t.Fatal("the host never saw the guest's connection")
	}
	origID, err := g.run(ctx, "cat", "/etc/machine-id")
	if err != nil {
		t.Fatal(err)
	}
	quiesce(t, ctx, orig, tv.token, client.PauseOptions{})
	snap := t.TempDir()
	snapshot(t, orig, snap)
	c.Close()
	orig.Close()

	tokens, ids := map[string]bool{}, map[string]bool{origID: true}
	var clones []*vm.VM
	for i := range 3 {
		v, _ := restoreHealthy(t, t, tv.cfg, snap)
		clones = append(clones, v)
		sandbox := fmt.Sprintf("lifecycle-%d", i)
		resumed := time.Now()
		// The host's word on the network: the same address and gateway
		// (QEMU's user network), another name server.
		h, err := client.Host{URL: v.AgentURL(), Token: tv.token}.Resume(ctx, client.ResumeOptions{
			ResumeID: sandbox, TimeUnixNs: time.Now().UnixNano(), SandboxID: sandbox,
			Network: &client.NetworkFacts{Address: "10.0.2.15/24", Gateway: "10.0.2.2", DNS: []string{"10.0.2.3", "192.0.2.53"}}})
		if err != nil {
			t.Fatalf("clone %d: resume: %v", i, err)
		}
		lr := h.LastResume
		if lr == nil || !lr.NewSandbox || len(lr.Hooks) != 1 || lr.Hooks[0].ExitCode == nil || *lr.Hooks[0].ExitCode != 0 {
			t.Fatalf("clone %d: last_resume %+v", i, lr)
		}
		if len(lr.ConnectionsReset) != 1 || lr.ConnectionsReset[0].Remote != "10.0.2.2:"+strconv.Itoa(port) || lr.ResetError != "" {
			t.Errorf("clone %d: connections reset %+v (%s), want the one to the host", i, lr.ConnectionsReset, lr.ResetError)
		}
		if n := lr.Network; n == nil || n.Error != "" || n.Interface != "eth0" || len(n.Announced) != 1 || n.Announced[0] != "10.0.2.15" ||
			len(n.Changed) != 2 || !strings.Contains(n.Changed[1], "192.0.2.53") {
			t.Errorf("clone %d: the network repair: %+v, want the name servers changed and 10.0.2.15 announced on eth0", i, n)
		}
		cg := guest{dial(t, ctx, v.AgentURL(), tv.token, client.Options{})}
		if rc, err := cg.run(ctx, "cat", "/etc/resolv.conf"); err != nil || !strings.Contains(rc, "nameserver 10.0.2.3\nnameserver 192.0.2.53\n") {
			t.Errorf("clone %d: resolv.conf %q, %v", i, rc, err)
		}
		// The hook ran before the answer: its files are there already.
		tok, err := cg.run(ctx, "cat", "/run/clone-token")
		if err != nil || len(tok) != 32 || tokens[tok] {
			t.Errorf("clone %d: token %q (%v), want one of its own", i, tok, err)
		}
		tokens[tok] = true
		if env, _ := cg.run(ctx, "cat", "/run/clone-env"); env != fmt.Sprintf("post-clone %s 1 1\n", sandbox) {
			t.Errorf("clone %d: the hook was told %q", i, env)
		}
		id, err := cg.run(ctx, "cat", "/etc/machine-id")
		if err != nil || ids[id] {
			t.Errorf("clone %d: machine id %q (%v), want one of its own", i, id, err)
		}
		ids[id] = true
		var remote string
		for remote == "" && time.Since(resumed) < opTimeout {
			remote, _ = cg.sh(ctx, "cat /tmp/conn-remote 2>/dev/null; true")
		}
		if !strings.HasPrefix(remote, "error") {
			t.Errorf("clone %d: the read on the host connection returned %q, want an error", i, remote)
		} else if f := strings.Fields(remote); len(f) > 0 {
			at, _ := strconv.ParseFloat(f[len(f)-1], 64)
			timings.add(t, "clone: resume answered to the stale connection's read failing", time.Unix(0, int64(at*1e9)).Sub(resumed))
		}
		if lb, _ := cg.sh(ctx, "cat /tmp/conn-loopback 2>/dev/null; true"); lb != "" {
			t.Errorf("clone %d: the loopback connection was touched: %q", i, lb)
		}
	}

	// A plain resume of the first clone after 5 s: under the stale
	// threshold, nothing is reset and the loopback connection lives on.
	v := clones[0]
	cg := guest{dial(t, ctx, v.AgentURL(), tv.token, client.Options{})}
	if err := cg.WriteFile(ctx, "/etc/rayito/hooks/post-resume.d/50-slow", []byte("#!/bin/sh\necho slow >&2\nsleep 60\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := cg.run(ctx, "chmod", "755", "/etc/rayito/hooks/post-resume.d/50-slow"); err != nil {
		t.Fatal(err)
	}
	quiesce(t, ctx, v, tv.token, client.PauseOptions{})
	if err := v.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := v.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	h, err := client.Host{URL: v.AgentURL(), Token: tv.token}.Resume(ctx, client.ResumeOptions{ResumeID: "plain", TimeUnixNs: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	timings.add(t, "plain resume with a post-resume hook past its 5 s timeout: answered in", time.Since(started))
	lr := h.LastResume
	if lr == nil || len(lr.ConnectionsReset) != 0 || lr.NewSandbox || lr.Network == nil || len(lr.Network.Changed) != 0 || lr.Network.Error != "" {
		t.Errorf("the plain resume: %+v, want nothing reset", lr)
	}
	if lr != nil && (len(lr.Hooks) != 1 || !lr.Hooks[0].TimedOut || lr.Hooks[0].StderrTail != "slow\n") {
		t.Errorf("the slow hook: %+v, want it timed out, killed and reported", lr.Hooks)
	}
	if lb, _ := cg.sh(ctx, "cat /tmp/conn-loopback 2>/dev/null; true"); lb != "" {
		t.Errorf("after the plain resume the loopback connection was touched: %q", lb)
	}
	if _, err := cg.run(ctx, "kill", "-USR1", strconv.Itoa(p.Pid())); err != nil {
		t.Fatal(err)
	}
	var lb string
	for lb == "" && time.Since(started) < opTimeout {
		lb, _ = cg.sh(ctx, "cat /tmp/conn-loopback 2>/dev/null; true")
	}
	if !strings.HasPrefix(lb, "data") {
		t.Errorf("a byte sent over the loopback connection after the resumes: %q, want it read", lb)
	}
}
