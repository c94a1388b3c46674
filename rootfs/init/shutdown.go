package main

import (
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// shutdownGrace is how long every process gets between SIGTERM and SIGKILL
// when the machine goes down.
const shutdownGrace = 3 * time.Second

// shutdown ends every process, flushes the disk and halts the machine.
// It never returns.
func shutdown(mode haltMode, log *zap.Logger) {
	log.Info("terminating all processes")
	_ = unix.Kill(-1, unix.SIGTERM)
	deadline := time.Now().Add(shutdownGrace)
	for time.Now().Before(deadline) && othersAlive() {
		time.Sleep(50 * time.Millisecond)
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	unix.Sync()
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		log.Warn("remount / read-only", zap.Error(err))
	}
	unix.Sync()
	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	if mode == haltReboot {
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	}
	log.Info("halting", zap.Bool("reboot", mode == haltReboot))
	_ = log.Sync()
	err := unix.Reboot(cmd)
	// PID 1 must not exit: that panics the kernel.
	log.Error("reboot syscall failed", zap.Error(err))
	for {
		time.Sleep(time.Hour)
	}
}

// othersAlive reports whether any process other than PID 1 and kernel
// threads still exists; the reaper collects them as they exit.
func othersAlive() bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 {
			continue
		}
		// Kernel threads have an empty cmdline.
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && len(b) > 0 {
			return true
		}
	}
	return false
}
