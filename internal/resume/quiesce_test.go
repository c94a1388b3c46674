package resume

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSyncPicksRealFilesystems: of a mount table, the pause syncs one
// directory mount per device of a block filesystem: not nsfs (`ip netns
// add` bind-mounts one), not a single file bind-mounted (the directory
// mount of its device, later in the table, stands for it), not read-only
// or nodev mounts.
func TestSyncPicksRealFilesystems(t *testing.T) {
	table := strings.Join([]string{
		`22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw`,
		`23 22 0:4 net:[4026532300] /run/netns/blue rw - nsfs nsfs rw`,
		`24 22 8:17 /app/config.json /etc/app.json rw - ext4 /dev/sdb1 rw`,
		`25 22 8:17 / /data rw - ext4 /dev/sdb1 rw`,
		`26 22 8:33 / /ro ro - ext4 /dev/sdc1 ro`,
		`27 22 0:30 / /tmp rw - tmpfs tmpfs rw`,
		`28 22 8:18 / /mnt/with\040space rw - xfs /dev/sdb2 rw`,
	}, "\n")
	files := map[string]bool{"/run/netns/blue": true, "/etc/app.json": true}
	got, err := parseMountinfo(strings.NewReader(table), map[string]bool{"ext4": true, "xfs": true}, func(d string) bool { return !files[d] })
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, f := range got {
		dirs = append(dirs, f.dir)
	}
	if want := []string{"/", "/data", "/mnt/with space"}; !slices.Equal(dirs, want) {
		t.Fatalf("synced %q, want %q", dirs, want)
	}
	if types, err := blockTypes(); err != nil || !types["ext4"] || types["nsfs"] || types["tmpfs"] || types["proc"] {
		t.Fatalf("block types %v, %v", types, err)
	}
}

// TestSyncWithANetnsMount: with a network namespace's nsfs bind mount in
// the mount table (as `ip netns add` makes), the pause's sync step
// succeeds: it failed with "not a directory" before.
func TestSyncWithANetnsMount(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount")
	}
	target := filepath.Join(t.TempDir(), "netns-blue")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	errs := make(chan string, 1)
	go func() {
		defer close(errs)
		// A mount namespace of this thread's own, thrown away with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errs <- "skip: unshare: " + err.Error()
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errs <- "skip: private mounts: " + err.Error()
			return
		}
		if err := unix.Mount("/proc/self/ns/net", target, "", unix.MS_BIND, ""); err != nil {
			errs <- "skip: bind-mounting a netns: " + err.Error()
			return
		}
		fss, err := writableFilesystems()
		if err != nil {
			errs <- err.Error()
			return
		}
		for _, f := range fss {
			if f.dir == target || f.fstype == "nsfs" {
				errs <- "the sync list has the netns mount " + f.dir
			}
		}
		if d, err := syncFilesystems(fss); err != nil {
			errs <- "sync: " + d + ": " + err.Error()
		}
	}()
	for e := range errs {
		if strings.HasPrefix(e, "skip: ") {
			t.Skip(e)
		}
		t.Error(e)
	}
}
