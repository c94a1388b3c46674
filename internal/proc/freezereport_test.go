package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFreezeReportNamesWhatDidNotStop: the error of a freeze that did not
// finish names the processes of the cgroups not yet frozen (by pid, name
// and cgroup), and a thaw's names those still frozen but for the cgroups
// the user froze itself. (The cgroup files are written here: the real
// ones are driven in the VM, TestCgroupV2FreezeSubtree.)
func TestFreezeReportNamesWhatDidNotStop(t *testing.T) {
	base := t.TempDir()
	self := strconv.Itoa(os.Getpid())
	cg := func(rel, events, freeze, procs string) {
		d := filepath.Join(base, rel)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "cgroup.events"), []byte("populated 1\nfrozen "+events+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte(freeze+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(procs), 0o644)
	}
	cg("user", "0", "1", "")
	cg("user/work/leaf-1", "1", "0", "1\n")
	cg("user/work/leaf-2", "0", "0", self+"\n")
	cg("user/work/leaf-2/theirs", "1", "1", "1\n")
	cg("hooks", "1", "1", "")
	c := &Cgroups{user: filepath.Join(base, "user"), hooks: filepath.Join(base, "hooks")}
	got := c.running(true)
	if !strings.Contains(got, self+" (") || !strings.Contains(got, "in user/work/leaf-2") || strings.Contains(got, "leaf-1") {
		t.Errorf("not stopped: %q, want this process in user/work/leaf-2 alone", got)
	}
	// Thawing: leaf-1 still frozen is named; theirs, frozen by the user, is not.
	got = c.running(false)
	if !strings.Contains(got, "1 (") || !strings.Contains(got, "in user/work/leaf-1") || strings.Contains(got, "theirs") {
		t.Errorf("still frozen: %q, want pid 1 in user/work/leaf-1 and not the user's own frozen cgroup", got)
	}
	if n := len(treeProcs(c.user)); n != 3 {
		t.Errorf("user work's processes: %d, want 3", n)
	}
}
