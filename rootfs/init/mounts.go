package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// mount is one filesystem the init sets up before anything else runs.
type mount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	optional               bool // failure is logged, not fatal
}

const (
	nosuidNodev       = unix.MS_NOSUID | unix.MS_NODEV
	nosuidNodevNoexec = nosuidNodev | unix.MS_NOEXEC
)

// systemMounts are in order: later targets live inside earlier ones.
var systemMounts = []mount{
	{source: "proc", target: "/proc", fstype: "proc", flags: nosuidNodevNoexec},
	{source: "sysfs", target: "/sys", fstype: "sysfs", flags: nosuidNodevNoexec},
	{source: "devtmpfs", target: "/dev", fstype: "devtmpfs", flags: unix.MS_NOSUID, data: "mode=0755"},
	{source: "devpts", target: "/dev/pts", fstype: "devpts", flags: unix.MS_NOSUID | unix.MS_NOEXEC, data: "gid=5,mode=0620,ptmxmode=0666"},
	{source: "tmpfs", target: "/dev/shm", fstype: "tmpfs", flags: nosuidNodev, data: "mode=1777"},
	{source: "tmpfs", target: "/run", fstype: "tmpfs", flags: nosuidNodev, data: "mode=0755"},
	{source: "tmpfs", target: "/tmp", fstype: "tmpfs", flags: nosuidNodev, data: "mode=1777"},
	{source: "cgroup2", target: "/sys/fs/cgroup", fstype: "cgroup2", flags: nosuidNodevNoexec, optional: true},
}

// devLinks are the /dev entries devtmpfs does not make but programs expect
// (bash process substitution needs /dev/fd).
var devLinks = [][2]string{
	{"/proc/self/fd", "/dev/fd"},
	{"/proc/self/fd/0", "/dev/stdin"},
	{"/proc/self/fd/1", "/dev/stdout"},
	{"/proc/self/fd/2", "/dev/stderr"},
	{"/dev/pts/ptmx", "/dev/ptmx"},
}

// mountAll mounts systemMounts, skipping targets that are already mount
// points (the initramfs may have moved /dev over).
func mountAll(log *zap.Logger) error {
	for _, m := range systemMounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil && !m.optional {
			return err
		}
		if isMountPoint(m.target) {
			continue
		}
		err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if err != nil && m.optional {
			log.Warn("optional mount failed", zap.String("target", m.target), zap.Error(err))
			continue
		}
		if err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	for _, l := range devLinks {
		if _, err := os.Lstat(l[1]); err == nil {
			// devtmpfs makes a ptmx node; the devpts one has our mode.
			if l[1] != "/dev/ptmx" {
				continue
			}
			_ = os.Remove(l[1])
		}
		if err := os.Symlink(l[0], l[1]); err != nil && !errors.Is(err, os.ErrExist) {
			log.Warn("dev link", zap.String("link", l[1]), zap.Error(err))
		}
	}
	return nil
}

// isMountPoint reports whether path is on another device than its parent.
func isMountPoint(path string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(path, &st) != nil || unix.Stat(path+"/..", &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// openConsole points stdin, stdout and stderr at /dev/console: the kernel
// may have started us without them if the root had no /dev/console node.
func openConsole() error {
	fd, err := unix.Open("/dev/console", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		if err := unix.Dup3(fd, i, 0); err != nil {
			return err
		}
	}
	return unix.Close(fd)
}

// setHostname uses name, else /etc/hostname, else the default.
func setHostname(name string) (string, error) {
	if name == "" {
		if b, err := os.ReadFile("/etc/hostname"); err == nil {
			name = strings.TrimSpace(string(b))
		}
	}
	if name == "" {
		name = defaultHostname
	}
	return name, unix.Sethostname([]byte(name))
}
