package main

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// plainShell is bash without startup files, which are slow on this
// machine and irrelevant here.
var plainShell = []string{"--", "/bin/bash", "--norc", "--noprofile"}

// screen collects what a local terminal shows.
type screen struct {
	mu  sync.Mutex
	out []byte
	pos int
}

func (s *screen) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out = append(s.out, b...)
	return len(b), nil
}

// line reports whether a line that is exactly text appeared after the
// last one found, and moves past it.
func (s *screen) line(text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	loc := regexp.MustCompile(`[\r\n]` + regexp.QuoteMeta(text) + `\r\n`).FindIndex(s.out[s.pos:])
	if loc == nil {
		return false
	}
	s.pos += loc[1]
	return true
}

// findProcess returns the pid of a process with this command line (NUL
// separated, as in /proc), or 0.
func findProcess(cmdline string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline"); err == nil && string(b) == cmdline {
			return pid
		}
	}
	return 0
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPTYCommandPiped: with stdin not a terminal, its bytes go to the
// remote terminal as they are, and the exit code comes back.
func TestPTYCommandPiped(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	in, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	w.WriteString("echo $((6*7))\nexit 4\n")
	w.Close()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	if code := runPTY(append([]string{"--url", url}, plainShell...), in, out, &errb); code != 4 {
		t.Fatalf("exit %d, want 4: %s", code, errb.String())
	}
	got, _ := os.ReadFile(out.Name())
	if s := (&screen{out: got}); !s.line("42") {
		t.Fatalf("no 42 in %q", got)
	}
	if code := runPTY([]string{"--url", url, "--user", "no-such-user-rayito"}, in, out, &errb); code != exitClientError {
		t.Fatalf("unknown user: exit %d", code)
	}
	// An empty stdin ends an interactive shell (bash, with readline),
	// however early its Ctrl-D arrives: a script's `rayito-agent pty`.
	empty, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if code := runPTY([]string{"--url", url, "--", "bash", "-i"}, empty, out, &errb); code != 0 {
		t.Fatalf("bash -i with an empty stdin: exit %d: %s", code, errb.String())
	}
}

// TestPTYCommandInteractive runs the command on a local terminal: raw
// mode while it runs, keystrokes (Ctrl-C included) go through as typed,
// the size and its changes reach the remote terminal, the exit code comes
// back and the local terminal is restored.
func TestPTYCommandInteractive(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer tty.Close()
	if err := pty.Setsize(master, &pty.Winsize{Rows: 33, Cols: 111}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	scr := &screen{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			scr.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	var errb bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- runPTY(append([]string{"--url", url}, plainShell...), tty, tty, &errb) }()
	typeIn := func(s string) {
		if _, err := master.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	typeIn("stty size\r")
	waitUntil(t, "the remote terminal has the local size", func() bool { return scr.line("33 111") })
	if now, _ := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); now.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Fatalf("local terminal not raw: lflag %#x", now.Lflag)
	}

	if err := pty.Setsize(master, &pty.Winsize{Rows: 44, Cols: 122}); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGWINCH)
	waitUntil(t, "the remote terminal follows the resize", func() bool {
		typeIn("stty size\r")
		time.Sleep(100 * time.Millisecond)
		return scr.line("44 122")
	})

	typeIn("sleep 99.77\r")
	var sleep int
	waitUntil(t, "sleep runs", func() bool { sleep = findProcess("sleep\x0099.77\x00"); return sleep > 0 })
	typeIn("\x03")
	waitUntil(t, "Ctrl-C ended sleep", func() bool { return findProcess("sleep\x0099.77\x00") != sleep })
	typeIn("echo ok$((1+1))\r")
	waitUntil(t, "the shell survived Ctrl-C", func() bool { return scr.line("ok2") })

	typeIn("exit 3\r")
	select {
	case c := <-code:
		if c != 3 {
			t.Fatalf("exit %d, want 3: %s", c, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("pty command did not return")
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil || *after != *before {
		t.Fatalf("terminal not restored: %+v, was %+v (%v)", after, before, err)
	}
}
