package proc

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReaperAndOOMScore(t *testing.T) {
	// Shield the test process the way the image shields the agent; the
	// child must get an ordinary score back.
	old, _ := os.ReadFile("/proc/self/oom_score_adj")
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-500"), 0); err != nil {
		t.Skipf("cannot lower oom_score_adj here: %v", err)
	}
	defer os.WriteFile("/proc/self/oom_score_adj", old, 0)
	testManager(t) // starts the package's one reaper
	r := sharedReaper
	r.protected = true
	defer func() { r.protected = false }()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	pr, pw, _ := os.Pipe()
	defer pr.Close()
	attr := &syscall.ProcAttr{Files: []uintptr{null.Fd(), pw.Fd(), pw.Fd()}}
	pid, status, err := r.ForkExec("/bin/sh", []string{"sh", "-c", "sleep 0.2; cat /proc/self/oom_score_adj; exit 7"}, attr)
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := pr.Read(buf)
	if got := strings.TrimSpace(string(buf[:n])); got != "0" {
		t.Fatalf("child oom_score_adj %q, want 0", got)
	}
	select {
	case st := <-status:
		if st.Pid != pid || st.ExitCode() != 7 {
			t.Fatalf("status %+v", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit status")
	}
	if err := r.Kill(pid, syscall.SIGTERM, false); err != syscall.ESRCH {
		t.Fatalf("Kill of a reaped pid: %v, want ESRCH", err)
	}
}
