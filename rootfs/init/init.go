package main

import (
	"context"
	"os"
	"os/signal"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Restart pacing for the agent, and how long it gets to stop cleanly.
const (
	agentMinBackoff = 100 * time.Millisecond
	agentMaxBackoff = 5 * time.Second
	agentStable     = 10 * time.Second // a run this long resets the backoff
	agentStopGrace  = 5 * time.Second
)

// baseEnv is what the agent gets before the environment file; the kernel
// hands PID 1 an almost empty environment.
var baseEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
}

// agentNoFile is the open-file limit the agent runs with, as in the unit.
const agentNoFile = 1 << 20

// runInit is PID 1's life: set the system up, supervise the agent until
// SIGTERM or SIGINT, then shut down. It never returns.
func runInit(log *zap.Logger) {
	// From now on ctrl-alt-del sends SIGINT instead of rebooting at once.
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF)
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()

	if err := mountAll(log); err != nil {
		log.Error("mounts", zap.Error(err))
	}
	if err := openConsole(); err != nil {
		log.Warn("console", zap.Error(err))
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		log.Error("read kernel command line", zap.Error(err))
	}
	cfg := parseCmdline(string(cmdline))
	for _, p := range cfg.Problems {
		log.Warn("ignored kernel parameter", zap.String("param", p))
	}
	if name, err := setHostname(cfg.Hostname); err != nil {
		log.Warn("hostname", zap.String("name", name), zap.Error(err))
	}
	if err := configureNetwork(cfg.Net, log); err != nil {
		log.Error("network", zap.Error(err))
	}

	reaper, err := proc.NewReaper()
	if err != nil {
		log.Error("reaper", zap.Error(err))
		shutdown(cfg.Halt, log)
	}
	fileEnv, err := readEnvFile(cfg.EnvFile)
	if err != nil {
		log.Error("environment file ignored", zap.String("path", cfg.EnvFile), zap.Error(err))
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: agentNoFile, Max: agentNoFile}); err != nil {
		log.Warn("raise open-file limit", zap.Error(err))
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		log.Error("open /dev/null", zap.Error(err))
		shutdown(cfg.Halt, log)
	}
	sup := &supervisor{
		path:      cfg.Agent,
		argv:      []string{cfg.Agent},
		env:       mergeEnv(baseEnv, fileEnv),
		files:     []uintptr{devNull.Fd(), os.Stdout.Fd(), os.Stderr.Fd()},
		reaper:    reaper,
		log:       log.Named("agent"),
		backoff:   backoff{min: agentMinBackoff, max: agentMaxBackoff, stable: agentStable},
		stopGrace: agentStopGrace,
		onStart:   protectFromOOM(log),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sup.run(ctx)
	}()
	<-ctx.Done()
	log.Info("shutdown requested")
	<-done
	shutdown(cfg.Halt, log)
}
