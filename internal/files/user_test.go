package files

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
	"golang.org/x/sys/unix"
)

// TestNobody: operations as nobody are checked as nobody, and what nobody
// creates belongs to nobody, with the umask's mode.
func TestNobody(t *testing.T) {
	t.Parallel()
	needRoot(t)
	m, _ := newManager(t)
	for name, root := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			openToAll(t, root)
			private := filepath.Join(root, "private")
			os.Mkdir(private, 0o700)
			writeFile(t, filepath.Join(private, "secret"), "s")

			_, err := m.List("nobody", "/root", 1)
			wantKind(t, err, ErrPermission)
			_, err = m.Open("", "nobody", filepath.Join(private, "secret"))
			wantKind(t, err, ErrPermission)
			_, err = m.Stat("nobody", filepath.Join(private, "secret"))
			wantKind(t, err, ErrPermission)
			_, err = m.Create("nobody", filepath.Join(private, "new"), WriteOptions{})
			wantKind(t, err, ErrPermission)
			wantKind(t, m.Remove("nobody", filepath.Join(private, "secret"), false), ErrPermission)
			wantKind(t, m.MakeDir("nobody", filepath.Join(private, "d"), true), ErrPermission)
			wantKind(t, m.Move("nobody", filepath.Join(private, "secret"), filepath.Join(root, "stolen")), ErrPermission)

			w, err := m.Create("nobody", filepath.Join(root, "mine/sub/f"), WriteOptions{Parents: true})
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(w, "by nobody")
			if _, err := w.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := m.MakeDir("nobody", filepath.Join(root, "mine/dir"), true); err != nil {
				t.Fatal(err)
			}
			nobody, _ := m.User("nobody")
			for p, mode := range map[string]os.FileMode{"mine": 0o755, "mine/sub": 0o755, "mine/sub/f": 0o644, "mine/dir": 0o755} {
				st, err := os.Stat(filepath.Join(root, p))
				if err != nil {
					t.Fatal(err)
				}
				sys := st.Sys().(*syscall.Stat_t)
				if sys.Uid != nobody.UID || sys.Gid != nobody.GID || st.Mode().Perm() != mode {
					t.Fatalf("%s: owner %d:%d mode %v, want %d:%d %v", p, sys.Uid, sys.Gid, st.Mode().Perm(), nobody.UID, nobody.GID, mode)
				}
			}
			info, err := m.Stat("nobody", filepath.Join(root, "mine/sub/f"))
			if err != nil || info.Owner != "nobody" || info.Group != "nogroup" {
				t.Fatalf("stat as nobody: %+v, %v", info, err)
			}
		})
	}
}

// TestDefaultUser: an operation that names no user runs as the default
// user of the accounts it shares with the process defaults, as commands
// do.
func TestDefaultUser(t *testing.T) {
	t.Parallel()
	needRoot(t)
	defaults := &proc.Defaults{}
	defaults.Set("nobody", "", nil)
	m, err := New(Options{Users: defaults.Users()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	_, err = m.List("", dir, 1)
	wantKind(t, err, ErrPermission)
	if _, err := m.List("root", dir, 1); err != nil {
		t.Fatalf("as root by name: %v", err)
	}
}

// TestIdentityStaysOnItsThread: while operations run as nobody on
// borrowed threads, everything else in the process keeps the agent's
// identity, and so do the threads once given back.
func TestIdentityStaysOnItsThread(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	f := rootOnlyFile(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := m.Stat("nobody", f); err == nil {
					t.Error("nobody could stat a file in a 0700 directory of root")
					return
				}
				runtime.Gosched()
			}
		}()
	}
	for range 2000 {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatalf("the agent lost its identity: %v", err)
		}
		if _, err := m.Stat("", f); err != nil {
			t.Fatalf("the agent lost its identity: %v", err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestUserKeepsOffRootReserve: a user's upload gets no more of a disk
// than the user's own process would. ext4 keeps a share of its blocks for
// root; a write as nobody stops with ErrNoSpace where that share begins,
// and root can still write after it. (Written with the agent's identity,
// the upload would have filled the root's share too.)
func TestUserKeepsOffRootReserve(t *testing.T) {
	t.Parallel()
	dir := mountExt4(t, 16<<20, 50)
	m, _ := newManager(t)
	fill := func(user, name string, limit int) (int, error) {
		w, err := m.Create(user, filepath.Join(dir, name), WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, 1<<20)
		for i := range limit {
			if _, err := w.Write(chunk); err != nil {
				return i, err
			}
		}
		_, err = w.Commit()
		return limit, err
	}
	mib, err := fill("nobody", "nobody's", 32)
	wantKind(t, err, ErrNoSpace)
	if mib > 8 {
		t.Fatalf("nobody wrote %d MiB into a 16 MiB filesystem half reserved for root", mib)
	}
	if _, err := fill("", "root's", 2); err != nil {
		t.Fatalf("root could not use its reserve after nobody filled the rest: %v", err)
	}
}

// TestFailedSwitchBackRetiresThread: when a thread cannot get the agent's
// identity back, the operation still gets its result, the thread ends,
// and the agent's own operations keep working: no thread is left with
// nobody's identity.
func TestFailedSwitchBackRetiresThread(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	f := rootOnlyFile(t)
	m.restoreIDs = func(identity, bool) error { return errors.New("injected") }
	u, err := m.User("nobody")
	if err != nil {
		t.Fatal(err)
	}
	tid := 0
	errOp := errors.New("the operation's own error")
	if err := m.as(u, func() error {
		tid = unix.Gettid()
		return errOp
	}); err != errOp {
		t.Fatalf("as = %v, want the operation's error", err)
	}
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the thread that kept nobody's identity is still alive (%s)", task)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 200 {
		if _, err := m.Stat("", f); err != nil {
			t.Fatalf("the agent lost its identity: %v", err)
		}
		runtime.Gosched()
	}
}

// TestNestedSwitch: an operation as a user inside another runs as its
// user, and the outer one still acts as its own after it.
func TestNestedSwitch(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	f := rootOnlyFile(t)
	u, err := m.User("nobody")
	if err != nil {
		t.Fatal(err)
	}
	readable := func() bool {
		_, err := os.ReadFile(f)
		return err == nil
	}
	var inner, after bool
	err = m.as(u, func() error {
		m.as(u, func() error {
			inner = readable()
			return nil
		})
		after = readable()
		return nil
	})
	if err != nil || inner || after {
		t.Fatalf("as nobody: %v; root's file readable inside %v, after the inner operation %v", err, inner, after)
	}
}

// TestSupplementaryGroups: a user's other groups count as a process of
// the user's would have them (a switch that skipped setgroups for such a
// user would be refused here), and a user without them is refused.
func TestSupplementaryGroups(t *testing.T) {
	needRoot(t)
	name, group := proctest.AccountNames(t)
	run := func(argv ...string) {
		t.Helper()
		proctest.Admin(t, nil, argv...)
	}
	run("groupadd", group)
	t.Cleanup(func() { exec.Command("groupdel", group).Run() })
	run("useradd", "-M", "-s", "/usr/sbin/nologin", "-G", group, name)
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	g, err := user.LookupGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(g.Gid)

	m, _ := newManager(t)
	parent := t.TempDir()
	openToAll(t, parent)
	dir := filepath.Join(parent, "shared")
	os.Mkdir(dir, 0o750)
	os.Chown(dir, 0, gid)
	writeFile(t, filepath.Join(dir, "f"), "x")
	if _, err := m.List(name, dir, 1); err != nil {
		t.Errorf("a member of %s cannot list its 0750 directory: %v", group, err)
	}
	_, err = m.List("nobody", dir, 1)
	wantKind(t, err, ErrPermission)
	if _, err := m.List(name, dir, 1); err != nil {
		t.Errorf("after nobody's switch, a member of %s cannot list its directory: %v", group, err)
	}
}

func TestSameGroups(t *testing.T) {
	for _, c := range []struct {
		groups, own []uint32
		same        bool
	}{
		{[]uint32{65534}, nil, true},      // only the primary group
		{nil, nil, true},                  // no groups at all
		{[]uint32{65534, 27}, nil, false}, // another group to add
		{[]uint32{65534}, []uint32{0}, false},
		{[]uint32{65534, 0}, []uint32{0}, true},
		{[]uint32{65534, 0, 0}, []uint32{0}, true}, // duplicates
		{[]uint32{65534}, []uint32{65534}, true},   // the primary group among own
	} {
		u := User{UID: 65534, GID: 65534, Groups: c.groups}
		if got := sameGroups(u, c.own); got != c.same {
			t.Errorf("sameGroups(groups %v, own %v) = %v, want %v", c.groups, c.own, got, c.same)
		}
	}
}

// rootOnlyFile is a file in a directory only root may enter.
func rootOnlyFile(t *testing.T) string {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	f := filepath.Join(dir, "f")
	writeFile(t, f, "x")
	return f
}

// TestIdentityThreadsBounded: operations as other users run on at most
// identityThreads threads at once; one that waits too long for a thread
// is refused with ErrBusy (limit) and changes nothing; the agent's own
// operations never wait.
func TestIdentityThreadsBounded(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	m.identities = make(chan struct{}, 1)
	old := identityWait
	identityWait = 50 * time.Millisecond
	defer func() { identityWait = old }()
	dir := "/"                 // any user may stat it
	m.identities <- struct{}{} // the one thread, busy
	if _, err := m.Stat("nobody", dir); !errors.Is(err, ErrBusy) || Code(err) != "limit" {
		t.Fatalf("stat as nobody with every thread busy: %v", err)
	}
	if _, err := m.Stat("", dir); err != nil {
		t.Fatalf("the agent's own stat waited for a thread: %v", err)
	}
	<-m.identities
	if _, err := m.Stat("nobody", dir); err != nil {
		t.Fatalf("stat as nobody once the thread is free: %v", err)
	}
}

// TestIdentityBounded: an operation as another user that does not end
// (a hung file system, in life) answers its caller with ErrBusy after
// identityBound; its thread keeps its slot until the call returns, and
// then gives it back. Not parallel: it changes the package's bound.
func TestIdentityBounded(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	nobody, err := m.User("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	m.identities = make(chan struct{}, 1)
	old := identityBound
	identityBound = 100 * time.Millisecond
	defer func() { identityBound = old }()
	release := make(chan struct{})
	began := time.Now()
	err = m.as(nobody, func() error { <-release; return nil })
	if !errors.Is(err, ErrBusy) || time.Since(began) > 10*time.Second {
		t.Fatalf("a call that does not end: %v after %v", err, time.Since(began))
	}
	if len(m.identities) != 1 {
		t.Fatal("the slot was given back while its thread still runs")
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for len(m.identities) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the slot was never given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
