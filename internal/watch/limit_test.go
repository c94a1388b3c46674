package watch

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// limitChild marks the test process that runs inside its own user
// namespace, where the inotify watch limit can be lowered for it alone.
const limitChild = "RAYITO_WATCH_LIMIT_CHILD"

// watchLimit is the limit the child sets; its trees are sized around it.
const watchLimit = 40

// TestWatchLimit runs itself again in a new user namespace with a limit
// of 40 inotify watches, and checks there that reaching the limit is a
// clear error, both when watching and when a watched tree grows.
func TestWatchLimit(t *testing.T) {
	if os.Getenv(limitChild) != "" {
		testWatchLimitInNamespace(t)
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchLimit$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), limitChild+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
	}
	// No Reaper runs in this test binary, so waiting on a child is safe.
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Skipf("cannot start a test process in a user namespace: %v", err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestWatchLimit") {
		t.Fatalf("in the user namespace: %v\n%s", err, out)
	}
}

func testWatchLimitInNamespace(t *testing.T) {
	must(t, os.WriteFile("/proc/sys/user/max_inotify_watches", []byte(strconv.Itoa(watchLimit)), 0))
	m, _ := newManager(t)

	big := t.TempDir()
	for i := range watchLimit + 10 {
		must(t, os.Mkdir(filepath.Join(big, "d"+strconv.Itoa(i)), 0o755))
	}
	_, err := m.Watch(big, true)
	if wireCode(err) != wire.CodeLimit || !strings.Contains(err.Error(), "fs.inotify.max_user_watches") {
		t.Fatalf("watching %d directories with a limit of %d: %v; want limit naming fs.inotify.max_user_watches",
			watchLimit+11, watchLimit, err)
	}
	if n := m.InotifyWatches(); n != 0 {
		t.Errorf("the failed watch left %d inotify watches", n)
	}

	root := t.TempDir()
	s := mustWatch(t, m, root, true)
	c := attach(t, s, 0)
	for i := range watchLimit {
		must(t, os.Mkdir(filepath.Join(root, "d"+strconv.Itoa(i)), 0o755))
	}
	for {
		if _, ok := c.next(); !ok {
			break
		}
	}
	if e := c.end.End; e.Reason != stream.ReasonError || !strings.Contains(e.Message, "fs.inotify.max_user_watches") {
		t.Errorf("a tree grown past the limit: end %+v; want reason error naming fs.inotify.max_user_watches", e)
	}
	m.Nodes()
	if n := m.InotifyWatches(); n != 0 {
		t.Errorf("the failed watch left %d inotify watches", n)
	}
}
