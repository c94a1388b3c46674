package resume

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// journalFS makes FIFREEZE and FITHAW record "fsfreeze DIR" and "fsthaw
// DIR" in j instead of reaching the kernel, until the test ends.
func journalFS(t *testing.T, j *journal) {
	saved := fsIoctl
	fsIoctl = func(fd int, req uint, _ int) error {
		dir, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			return err
		}
		op := "fsfreeze"
		if req == ioctlFITHAW {
			op = "fsthaw"
		}
		j.add(op + " " + dir)
		return nil
	}
	t.Cleanup(func() { fsIoctl = saved })
}

// TestFilesystemsFreezeChildFirst: with a disk mounted under another (a
// data disk under the root disk), the one mounted later (the child) is
// frozen first: a freeze of the parent first would leave the child's
// freeze to write through a frozen parent. They thaw parent first.
func TestFilesystemsFreezeChildFirst(t *testing.T) {
	j := &journal{}
	journalFS(t, j)
	root := t.TempDir()
	data := filepath.Join(root, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	// In mount order, as writableFilesystems lists them.
	frozen, _, err := freezeFilesystems([]filesystem{{dir: root, fstype: "ext4"}, {dir: data, fstype: "ext4"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := thawFilesystems(frozen); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{"fsfreeze " + data, "fsfreeze " + root, "fsthaw " + root, "fsthaw " + data}, ",")
	if got := j.String(); got != want {
		t.Fatalf("order %s\nwant  %s", got, want)
	}
}

// TestAbortThawsFilesystemsBeforeUserWork: an abort of a mode
// filesystem pause thaws the filesystems first: user work thawed first
// would run against frozen disks and block in D state.
func TestAbortThawsFilesystemsBeforeUserWork(t *testing.T) {
	fss, err := writableFilesystems()
	if err != nil || len(fss) == 0 {
		t.Skipf("no writable block filesystem here to pause (%v)", err)
	}
	j := &journal{}
	journalFS(t, j)
	m := journaled(j, false, Options{Machine: Machine{WholeVM: true}})
	req := pauseReq()
	req.Mode = ModeFilesystem
	if _, err := m.Pause(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Abort(); err != nil {
		t.Fatal(err)
	}
	got := j.String()
	lastFSThaw, userThaw := strings.LastIndex(got, "fsthaw "), strings.Index(got, ",thaw")
	if !strings.Contains(got, "fsfreeze ") || lastFSThaw < 0 || userThaw < 0 || userThaw < lastFSThaw {
		t.Fatalf("the abort's order: %s; want every fsthaw before user work's thaw", got)
	}
}

// freezeStuck is user work whose freeze does not finish (a task in
// uninterruptible sleep on a hung mount): it returns only when the
// pause's deadline ends it.
type freezeStuck struct{ j *journal }

func (u freezeStuck) Freeze(ctx context.Context) (string, error) {
	u.j.add("freeze")
	<-ctx.Done()
	return "", ctx.Err()
}
func (u freezeStuck) Thaw() error { u.j.add("thaw"); return nil }

// TestFreezeCutOffIsThawed: a freeze the deadline cut off has frozen
// part of user work; the abort thaws it, or those processes stay
// stopped until the agent restarts.
func TestFreezeCutOffIsThawed(t *testing.T) {
	j := &journal{}
	m := journaled(j, false, Options{})
	m.o.UserWork = freezeStuck{j}
	req := pauseReq()
	req.Deadline = 300 * time.Millisecond
	a, err := m.Pause(context.Background(), req)
	if err != nil || !a.DeadlinePassed {
		t.Fatalf("past the deadline: %+v, %v", a, err)
	}
	if _, err := m.Abort(); err != nil {
		t.Fatal(err)
	}
	if got := j.String(); !strings.Contains(got, "freeze") || !strings.HasSuffix(got, ",thaw") && !strings.Contains(got, ",thaw,") {
		t.Fatalf("after an abort of a pause whose freeze was cut off: %s; want user work thawed", got)
	}
}
