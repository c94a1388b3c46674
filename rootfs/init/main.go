// Command rayito-init is a small PID 1 for rayito sandboxes, for images that
// should boot fast without systemd. It mounts the kernel filesystems,
// configures the network from the kernel command line, sets the hostname,
// runs the agent and restarts it with a backoff if it dies, reaps orphans,
// and powers the machine off on SIGTERM or SIGINT (ctrl-alt-del).
//
// "rayito-init net" only configures the network and exits; systemd images
// run it from rayito-net.service so both integrations share one setup.
package main

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func main() {
	log := newLogger()
	defer func() { _ = log.Sync() }()

	if len(os.Args) > 1 {
		if os.Args[1] != "net" {
			fmt.Fprintf(os.Stderr, "usage: %s [net]\n", os.Args[0])
			os.Exit(2)
		}
		cmdline, err := os.ReadFile("/proc/cmdline")
		if err != nil {
			log.Fatal("read kernel command line", zap.Error(err))
		}
		cfg := parseCmdline(string(cmdline))
		if err := configureNetwork(cfg.Net, log); err != nil {
			log.Fatal("network", zap.Error(err))
		}
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "rayito-init: not PID 1; run it as the kernel's init, or use 'rayito-init net'")
		os.Exit(2)
	}
	runInit(log)
}

// newLogger writes human-readable lines to stderr, which is the console.
func newLogger() *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.InfoLevel)
	return zap.New(core).Named("rayito-init")
}
