package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary plays both agents: with handoverMode=letgo it writes a
// state and execs itself in place; started by that exec it is the new
// agent (handoverMode=take), and writes what it read to the carried file.
const handoverMode = "RAYITO_HANDOVER_TEST_MODE"

func TestMain(m *testing.M) {
	switch os.Getenv(handoverMode) {
	case "letgo":
		os.Exit(letGo())
	case "take":
		os.Exit(takeOver())
	case "back":
		os.Exit(takeBack())
	}
	os.Exit(m.Run())
}

func letGo() int {
	out, err := os.OpenFile(os.Getenv("OUT"), os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return 3
	}
	extra, err := os.Open(os.DevNull)
	if err != nil {
		return 3
	}
	s := New("v1-test")
	s.Put("counter", map[string]int{"x": 42})
	s.PutFile("out", out)
	s.PutFile("extra", extra) // carried, never taken: Done closes it
	fmt.Fprintf(out, "letgo pid=%d extra=%d\n", os.Getpid(), extra.Fd())
	env := append(withoutEnv(os.Environ(), handoverMode), handoverMode+"=take")
	err = s.Exec("/proc/self/exe", os.Args, env)
	fmt.Fprintf(out, "exec failed: %v\n", err)
	return 4
}

func takeOver() int {
	s, err := Take()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	out, err := s.Dup("out")
	if out == nil {
		fmt.Fprintln(os.Stderr, err)
		return 6
	}
	var c struct{ X int }
	ok, err := s.Get("counter", &c)
	if os.Getenv("HANDBACK") != "" {
		fmt.Fprintf(out, "take pid=%d failing\n", os.Getpid())
		env := append(withoutEnv(os.Environ(), handoverMode, "HANDBACK"), handoverMode+"=back")
		err := s.HandBack(os.Args, env, "adoption\nfailed")
		fmt.Fprintf(out, "hand-back failed: %v\n", err)
		return 7
	}
	carried, extra := s.env.FDs["out"], s.env.FDs["extra"]
	s.Commit()
	_, ferr := unix.FcntlInt(uintptr(extra), unix.F_GETFD, 0)
	_, ferr2 := unix.FcntlInt(uintptr(carried), unix.F_GETFD, 0)
	_, envSet := os.LookupEnv(EnvFD)
	fmt.Fprintf(out, "take pid=%d from=%s x=%d ok=%v err=%v closed=%v env=%v\n", os.Getpid(), s.FromVersion(), c.X, ok, err,
		errors.Is(ferr, unix.EBADF) && errors.Is(ferr2, unix.EBADF), envSet)
	return 0
}

// takeBack is the agent handed back to: it reads its own state again.
func takeBack() int {
	s, err := Take()
	if err != nil {
		return 8
	}
	out, _ := s.Dup("out")
	var c struct{ X int }
	s.Get("counter", &c)
	s.Commit()
	fmt.Fprintf(out, "back pid=%d x=%d failed=%q\n", os.Getpid(), c.X, s.Failed())
	return 0
}

// TestExecInPlace: the state and the carried descriptor cross execve in
// the same process; a descriptor nobody took is closed, and the
// environment variable is gone (children must not see it).
func TestExecInPlace(t *testing.T) {
	outPath := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(outPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), handoverMode+"=letgo", "OUT="+outPath)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the agents: %v\n%s", err, b)
	}
	b, _ := os.ReadFile(outPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line from each agent, got:\n%s", b)
	}
	var pid1, pid2, extra int
	fmt.Sscanf(lines[0], "letgo pid=%d extra=%d", &pid1, &extra)
	fmt.Sscanf(lines[1], "take pid=%d", &pid2)
	if pid1 == 0 || pid1 != pid2 {
		t.Fatalf("not the same process: %s", b)
	}
	if want := "from=v1-test x=42 ok=true err=<nil> closed=true env=false"; !strings.HasSuffix(lines[1], want) {
		t.Fatalf("the new agent read\n%s\nwant it to end %q", lines[1], want)
	}
}

// TestHandBack: a new agent that cannot take over execs the previous
// binary, in the same process, with the same state, saying why.
func TestHandBack(t *testing.T) {
	outPath := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(outPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), handoverMode+"=letgo", "OUT="+outPath, "HANDBACK=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the agents: %v\n%s", err, b)
	}
	b, _ := os.ReadFile(outPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a line from each of three execs, got:\n%s", b)
	}
	var pid1, pid3 int
	fmt.Sscanf(lines[0], "letgo pid=%d", &pid1)
	fmt.Sscanf(lines[2], "back pid=%d", &pid3)
	if pid1 == 0 || pid1 != pid3 || !strings.HasSuffix(lines[2], `x=42 failed="adoption failed"`) {
		t.Fatalf("the hand-back:\n%s", b)
	}
}

// TestExecFailureLeavesTheDescriptorsAsTheyWere: a failed exec returns,
// and the carried descriptors are close-on-exec again.
func TestExecFailureLeavesTheDescriptorsAsTheyWere(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := New("v1")
	s.PutFile("f", f)
	err = s.Exec(filepath.Join(t.TempDir(), "no-such-agent"), []string{"x"}, nil)
	if !errors.Is(err, unix.ENOENT) {
		t.Fatalf("exec of a missing binary: %v", err)
	}
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("after the failed exec the descriptor's flags are %#x (%v): close-on-exec lost", flags, err)
	}
}

// TestFormats: an agent reads the formats it lists and refuses another
// with ErrFormat; a damaged state is an error, not an empty one.
func TestFormats(t *testing.T) {
	for _, c := range []struct {
		state string
		want  error
	}{
		{`{"format": 1, "from_version": "a", "sections": {"x": 1}}`, nil},
		{`{"format": 99, "from_version": "future"}`, ErrFormat},
		{`{"format": 0}`, ErrFormat},
	} {
		_, err := decode([]byte(c.state))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.state, err, c.want)
		}
	}
	if _, err := decode([]byte(`{"format": 1`)); err == nil {
		t.Error("a torn state read without an error")
	}
	s := New("v")
	s.Put("sec", []int{1, 2})
	b, _ := json.Marshal(s.env)
	back, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	if ok, err := back.Get("sec", &got); !ok || err != nil || len(got) != 2 {
		t.Fatalf("round trip: %v %v %v", got, ok, err)
	}
	if ok, _ := back.Get("absent", &got); ok {
		t.Fatal("an absent section read as present")
	}
}

func TestTakeWithoutHandover(t *testing.T) {
	t.Setenv(EnvFD, "")
	os.Unsetenv(EnvFD)
	if _, err := Take(); !errors.Is(err, ErrNone) {
		t.Fatalf("Take with no state: %v", err)
	}
}
