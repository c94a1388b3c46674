package files

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkStat is one Stat as the agent's own user (no switch), as
// nobody (a thread borrows nobody's identity), against a bare lstat.
func BenchmarkStat(b *testing.B) {
	m, _ := newManager(b)
	dir := b.TempDir()
	openToAll(b, dir)
	p := filepath.Join(dir, "f")
	writeFile(b, p, "x")
	b.Run("lstat", func(b *testing.B) {
		for range b.N {
			if _, err := os.Lstat(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("self", func(b *testing.B) {
		for range b.N {
			if _, err := m.Stat("", p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("nobody", func(b *testing.B) {
		needRoot(b)
		for range b.N {
			if _, err := m.Stat("nobody", p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkIdentitySwitch compares ways to run an empty operation as
// nobody: the manager's as (a new goroutine locked to its thread, which
// switches with setresgid and setresuid and back, no setgroups when the
// groups match); the same with setfsgid and setfsuid, each checked by a
// second call since they report no failure (as until 2026-12-02, third
// session); the same with setgroups both ways (as until 2026-12-02,
// second session); the switch on the caller's own thread; and handing the
// operation to a thread kept with nobody's identity (before 2026-12-02).
// The caller's thread is the cheapest here, yet slowed every other
// request of the connection whose reader switched (docs/benchmarks.md,
// Files): BenchmarkStatRoundTrip in the client package measures the ways
// where they count.
func BenchmarkIdentitySwitch(b *testing.B) {
	needRoot(b)
	m, _ := newManager(b)
	u, err := m.User("nobody")
	if err != nil {
		b.Fatal(err)
	}
	id := identity{uid: u.UID, gid: u.GID, groups: u.Groups}
	switchBack := func(groups bool) {
		setIDs(id, groups)
		if err := restoreIDs(m.self, groups); err != nil {
			b.Fatal("identity not restored")
		}
	}
	onNewGoroutine := func(fn func()) {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			fn()
			runtime.UnlockOSThread()
			close(done)
		}()
		<-done
	}
	b.Run("as", func(b *testing.B) {
		for range b.N {
			m.as(u, func() error { return nil })
		}
	})
	b.Run("fsuid-checked", func(b *testing.B) {
		const query = uintptr(^uint32(0))
		set := func(uid, gid uint32) {
			unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
			unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
			g, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, query, 0, 0)
			u, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, query, 0, 0)
			if uint32(u) != uid || uint32(g) != gid {
				b.Fatal("fsuid not switched")
			}
		}
		for range b.N {
			onNewGoroutine(func() {
				set(id.uid, id.gid)
				set(m.self.uid, m.self.gid)
			})
		}
	})
	b.Run("new-goroutine-setgroups", func(b *testing.B) {
		for range b.N {
			onNewGoroutine(func() { switchBack(true) })
		}
	})
	b.Run("caller-thread", func(b *testing.B) {
		for range b.N {
			runtime.LockOSThread()
			switchBack(false)
			runtime.UnlockOSThread()
		}
	})
	b.Run("kept-thread", func(b *testing.B) {
		ops := make(chan chan struct{})
		go func() {
			runtime.LockOSThread()
			setIDs(id, true)
			for done := range ops {
				close(done)
			}
			if err := restoreIDs(m.self, true); err == nil {
				runtime.UnlockOSThread()
			}
		}()
		defer close(ops)
		for range b.N {
			done := make(chan struct{})
			ops <- done
			<-done
		}
	})
}

// BenchmarkList lists a directory of 1000 files as the agent's own user,
// with and without metadata (a listxattr an entry); readdir alone
// (os.ReadDir and each entry's lstat) is the baseline.
func BenchmarkList(b *testing.B) {
	m, _ := newManager(b)
	dir := b.TempDir()
	for i := range 1000 {
		writeFile(b, filepath.Join(dir, "f"+strconv.Itoa(i)), "x")
	}
	b.Run("readdir", func(b *testing.B) {
		for range b.N {
			entries, err := os.ReadDir(dir)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range entries {
				if _, err := e.Info(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		for range b.N {
			if _, err := m.List("", dir, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list+metadata", func(b *testing.B) {
		for range b.N {
			if _, err := m.ListWith("", dir, 1, InfoOptions{Metadata: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWrite writes 64 MiB through a Writer in 256 KiB writes (the
// smallest an upload makes at full speed) on a tmpfs, as the agent's own
// user and as nobody, whose every write switches a thread to nobody and
// back (Writer.writeAsUser). No hash and no sync: the difference is the
// switch.
func BenchmarkWrite(b *testing.B) {
	needRoot(b)
	m, _ := newManager(b)
	dir := filesystems(b)["tmpfs"]
	openToAll(b, dir)
	chunk := make([]byte, 256<<10)
	const total = 64 << 20
	for _, user := range []string{"", "nobody"} {
		name := user
		if name == "" {
			name = "self"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(total)
			for range b.N {
				w, err := m.Create(user, filepath.Join(dir, name), WriteOptions{NoHash: true})
				if err != nil {
					b.Fatal(err)
				}
				for range total / len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						b.Fatal(err)
					}
				}
				w.Abort()
			}
		})
	}
}

// BenchmarkWriteTar archives a directory of 200 small files as the
// agent and as nobody, into io.Discard: as nobody, each directory's
// listing and each file's open borrow nobody's identity (a slow reader
// then holds no thread), the bytes are copied as the agent.
func BenchmarkWriteTar(b *testing.B) {
	m, _ := newManager(b)
	dir := b.TempDir()
	openToAll(b, dir)
	for i := range 200 {
		sub := filepath.Join(dir, fmt.Sprintf("d%d", i%10))
		os.MkdirAll(sub, 0o755)
		writeFile(b, filepath.Join(sub, fmt.Sprintf("f%d", i)), strings.Repeat("x", 1000))
	}
	for _, user := range []string{"", "nobody"} {
		name := "self"
		if user != "" {
			name = user
		}
		b.Run(name, func(b *testing.B) {
			if user != "" {
				needRoot(b)
			}
			for range b.N {
				if err := m.WriteTar("", user, dir, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
