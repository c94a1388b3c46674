// Command vmrun boots the rayito image under QEMU, waits for the agent and
// prints its URL; ctrl-C stops the VM.
//
//	go run ./rootfs/vm/cmd/vmrun [-build build] [-init systemd] [-port 49983]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rayito/rayito-agent/rootfs/vm"
	"go.uber.org/zap"
)

func main() {
	build := flag.String("build", "build", "directory with rootfs.ext4, vmlinuz and initramfs.cpio.gz")
	image := flag.String("image", "", "root filesystem image (default: BUILD/rootfs.ext4)")
	mem := flag.Int("mem", vm.DefaultMemoryMiB, "memory in MiB")
	cpus := flag.Int("cpus", vm.DefaultCPUs, "virtual CPUs")
	accel := flag.String("accel", "auto", "auto, kvm or tcg")
	init := flag.String("init", "", `guest init: "" (rayito-init), "systemd", or a path`)
	port := flag.Int("port", 0, "host port on 127.0.0.1 for the agent (0: any free port)")
	wait := flag.Duration("timeout", 3*time.Minute, "how long to wait for the agent")
	flag.Parse()

	log, _ := zap.NewDevelopment()
	defer func() { _ = log.Sync() }()
	cfg := vm.BuildConfig(*build)
	if *image != "" {
		cfg.Image = *image
	}
	cfg.MemoryMiB, cfg.CPUs, cfg.HostPort, cfg.Log = *mem, *cpus, *port, log
	switch *accel {
	case "auto":
	case "kvm", "tcg":
		cfg.Accel = vm.Accel(*accel)
	default:
		fmt.Fprintf(os.Stderr, "vmrun: unknown -accel %q\n", *accel)
		os.Exit(2)
	}
	cfg.Init = *init
	if *init == "systemd" {
		cfg.Init = vm.InitSystemd
	}
	if err := run(cfg, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "vmrun:", err)
		os.Exit(1)
	}
}

func run(cfg vm.Config, wait time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	bctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v, err := vm.Boot(bctx, cfg)
	if err != nil {
		return err
	}
	defer v.Close()
	if err := v.WaitHealthy(bctx); err != nil {
		return err
	}
	fmt.Printf("agent: %s (healthy after %s, %s, console log %s)\n",
		v.AgentURL(), time.Since(started).Round(time.Millisecond), v.Accel(), v.SerialLog())
	fmt.Println("ctrl-C stops the VM")
	select {
	case <-ctx.Done():
		return nil
	case <-v.Exited():
		return fmt.Errorf("qemu exited; console:\n%s", v.SerialTail())
	}
}
