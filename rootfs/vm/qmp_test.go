package vm

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startBareQEMU runs a QEMU with no machine, just a monitor.
func startBareQEMU(t *testing.T) (sock string, cmd *exec.Cmd) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "qmp.sock")
	cmd = exec.Command(DefaultQEMU, "-M", "none", "-nodefaults", "-display", "none",
		"-qmp", "unix:"+sock+",server=on,wait=off")
	if err := cmd.Start(); err != nil {
		t.Skipf("no QEMU: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return sock, cmd
}

func TestQMP(t *testing.T) {
	checkGoroutines(t)
	sock, _ := startBareQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := dialQMP(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	var version struct {
		QEMU struct{ Major, Minor int } `json:"qemu"`
	}
	if err := q.execute(ctx, "query-version", nil, &version); err != nil {
		t.Fatal(err)
	}
	if version.QEMU.Major < 7 {
		t.Errorf("QEMU %d.%d; the harness needs 7.0 or later", version.QEMU.Major, version.QEMU.Minor)
	}

	var qerr *QMPError
	err = q.execute(ctx, "no-such-command", nil, nil)
	if !errors.As(err, &qerr) || qerr.Class != "CommandNotFound" {
		t.Errorf("unknown command: err = %v, want a CommandNotFound QMPError", err)
	}

	// Arguments go through: stop, then the status says so.
	if err := q.execute(ctx, "stop", nil, nil); err != nil {
		t.Fatal(err)
	}
	var status struct {
		Running bool   `json:"running"`
		Status  string `json:"status"`
	}
	if err := q.execute(ctx, "query-status", nil, &status); err != nil {
		t.Fatal(err)
	}
	if status.Running || status.Status != "paused" {
		t.Errorf("after stop: %+v", status)
	}
	if err := q.execute(ctx, "quit", nil, nil); err != nil && !errors.Is(err, ErrQMPClosed) {
		t.Fatalf("quit: %v", err)
	}
	if err := q.execute(ctx, "query-status", nil, nil); !errors.Is(err, ErrQMPClosed) {
		t.Errorf("after quit: err = %v, want ErrQMPClosed", err)
	}
}

func TestDialQMPGivesUpWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := dialQMP(ctx, filepath.Join(t.TempDir(), "never.sock"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}
}

// An event that reaches the client before the greeting is skipped: a
// loaded QEMU that started its machine as the client connected sent
// RESUME first (seen in a loaded `make test`). The socket here replays
// that order, then answers as QEMU does; anything but a greeting or an
// event first is still refused.
func TestQMPEventBeforeGreeting(t *testing.T) {
	serve := func(first string) string {
		sock := filepath.Join(t.TempDir(), "qmp.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			io.WriteString(c, first)
			io.WriteString(c, `{"QMP": {"version": {"qemu": {"major": 9, "minor": 0, "micro": 0}}, "capabilities": []}}`+"\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			if strings.Contains(line, "qmp_capabilities") {
				io.WriteString(c, `{"return": {}, "id": 1}`+"\r\n")
			}
		}()
		return sock
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := dialQMP(ctx, serve(`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "RESUME"}`+"\r\n"))
	if err != nil {
		t.Fatalf("an event before the greeting: %v", err)
	}
	q.Close()
	if _, err := dialQMP(ctx, serve(`{"error": {"class": "GenericError", "desc": "no"}}`+"\r\n")); err == nil || !strings.Contains(err.Error(), "greeting") {
		t.Errorf("an error before the greeting: err = %v, want a greeting error", err)
	}
}
