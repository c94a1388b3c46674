package main

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestSeveralListeners: an agent given --listen twice serves both alike: a
// command started over one is attached over the other, and the bytes that
// cross the second count as traffic as those of the first do.
func TestSeveralListeners(t *testing.T) {
	const token = "listeners-token"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	second := l.Addr().String()
	l.Close()
	first := startAgent(t, token, "--listen", second) // startAgent gives the first --listen itself
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := client.Dial(ctx, first, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := client.Dial(ctx, "ws://"+second, client.Options{Token: token})
	if err != nil {
		t.Fatalf("the second listener: %v", err)
	}
	defer b.Close()
	if a.Instance() != b.Instance() {
		t.Fatal("the two listeners answer for different agents")
	}
	p, err := a.Exec(ctx, client.ExecOptions{Cmd: "echo started over the first; read line; echo $line"})
	if err != nil {
		t.Fatal(err)
	}
	first22 := make([]byte, 22)
	if _, err := io.ReadFull(p.Stdout(), first22); err != nil {
		t.Fatal(err)
	}
	host := client.Host{URL: "ws://" + second, Token: token}
	before, err := host.Traffic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.Attach(ctx, client.AttachOptions{Stream: p.Stream()})
	if err != nil {
		t.Fatalf("attach over the second listener: %v", err)
	}
	q.Signal(ctx, client.SIGTERM)
	out, _ := io.ReadAll(q.Stdout())
	if !strings.Contains(string(out), "started over the first") {
		t.Fatalf("over the second listener: %q", out)
	}
	after, err := host.Traffic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.BytesOut <= before.BytesOut || after.BytesIn <= before.BytesIn {
		t.Fatalf("traffic over the second listener not counted: %+v then %+v", before, after)
	}
}

// TestListenErrors: bad vsock addresses and a vsock listener where the
// machine has no vsock transport fail at start with what to do.
func TestListenErrors(t *testing.T) {
	for _, addr := range []string{"vsock://3:49983", "vsock://:port", "vsock://", "vsock://:0", "vsock://:4294967295", "vsock://:4294967296"} {
		if _, err := listen(addr); err == nil || !strings.Contains(err.Error(), "want vsock://:PORT") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	// This machine has AF_VSOCK; what a machine without it answers.
	err := vsockListenError("vsock://:49983", &os.SyscallError{Syscall: "socket", Err: syscall.EAFNOSUPPORT})
	if err == nil || !strings.Contains(err.Error(), "no vsock transport") || !strings.Contains(err.Error(), "vmw_vsock_virtio_transport") {
		t.Fatalf("without AF_VSOCK: %v", err)
	}
}
