// Command vmrun boots the rayito image under QEMU, waits for the agent,
// gives it an access token (RAYITO_ACCESS_TOKEN, or a new one) as a host
// does with /v1/init, and prints its URL and the token; ctrl-C stops the
// VM. While it runs, `vmrun pause|resume|snapshot|restore|status` (make
// vm-pause, ...) do to it what a host does to a sandbox (control.go), and
// `vmrun demo` (make demo) runs the product's example end to end in a VM
// of its own (demo.go).
//
//	make vm, or: go build -o build/vmrun ./rootfs/vm/cmd/vmrun && build/vmrun [-build build] [-init systemd] [-port 49983]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
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
	dir := flag.String("dir", "", "work directory of the VM (disk layer, QMP socket, console log); default a new temporary one, removed at the end")
	ctl := flag.String("ctl", "", "the running runner's control socket (default: BUILD/vmrun.sock)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: vmrun [flags]             boot the image and keep it running\n"+
			"       vmrun [flags] COMMAND     pause, resume, snapshot [DIR], restore [DIR] or status, to the running one\n"+
			"       vmrun [flags] demo        x = 42, a counter, snapshot, restore: the product's example in a VM of its own\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *ctl == "" {
		*ctl = filepath.Join(*build, "vmrun.sock")
	}
	if flag.NArg() > 0 && commands[flag.Arg(0)] {
		os.Exit(control(*ctl, flag.Args()))
	}

	// Stack traces only for bugs: what goes wrong booting a VM is said
	// in the message.
	log, _ := zap.NewDevelopment(zap.AddStacktrace(zap.DPanicLevel))
	defer func() { _ = log.Sync() }()
	cfg := vm.BuildConfig(*build)
	if *image != "" {
		cfg.Image = *image
	}
	cfg.MemoryMiB, cfg.CPUs, cfg.HostPort, cfg.Log, cfg.WorkDir = *mem, *cpus, *port, log, *dir
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
	var err error
	switch {
	case flag.NArg() == 0:
		err = run(cfg, *wait, *ctl, filepath.Join(*build, "snapshot"))
	case flag.Arg(0) == "demo" && flag.NArg() == 1:
		err = demo(cfg, *wait)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmrun:", err)
		os.Exit(1)
	}
}

func run(cfg vm.Config, wait time.Duration, ctl, snapshot string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := stopWithParent(); err != nil {
		return err
	}
	started := time.Now()
	bctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v, err := vm.Boot(bctx, cfg)
	if err != nil {
		return err
	}
	c := &controller{cfg: cfg, v: v, snapshot: snapshot}
	defer func() { c.current().Close() }()
	if err := v.WaitHealthy(bctx); err != nil {
		return err
	}
	if c.token, err = giveToken(bctx, v.AgentURL()); err != nil {
		return err
	}
	if err := c.serve(ctx, ctl); err != nil {
		return err
	}
	url := strings.Replace(v.AgentURL(), "http://", "ws://", 1)
	fmt.Printf("agent: %s (healthy after %s, %s, console log %s)\n",
		url, time.Since(started).Round(time.Millisecond), v.Accel(), v.SerialLog())
	fmt.Printf("token: %s\n", c.token)
	fmt.Printf("try:   export RAYITO_ACCESS_TOKEN=%s RAYITO_URL=%s\n", c.token, url)
	fmt.Printf("       bin/rayito-agent exec -- uname -a\n")
	fmt.Printf("       make vm-snapshot; make vm-restore   (also vm-pause, vm-resume, vm-status: %s)\n", ctl)
	fmt.Println("ctrl-C stops the VM")
	for {
		v := c.current()
		select {
		case <-ctx.Done():
			return nil
		case <-v.Exited():
			if c.current() != v {
				continue // replaced by a restore
			}
			return fmt.Errorf("qemu exited; console:\n%s", v.SerialTail())
		}
	}
}

// stopWithParent asks for SIGTERM when the runner's parent dies (make
// killed by its PID, a shell closed), which stops the VM as ctrl-C does:
// a VM must never outlive whoever started it. QEMU itself dies with the
// runner (vm.Boot gives it a parent-death signal too).
func stopWithParent() error {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if os.Getppid() != parent {
		return fmt.Errorf("the runner's parent is gone")
	}
	return nil
}

// giveToken sets the agent's access token with the host's first
// /v1/init (the image's agent starts without one) and the wall clock:
// RAYITO_ACCESS_TOKEN if set, else a new random one.
func giveToken(ctx context.Context, url string) (string, error) {
	token := os.Getenv("RAYITO_ACCESS_TOKEN")
	if token == "" {
		b := make([]byte, 12)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		token = "vm-" + hex.EncodeToString(b)
	}
	// The bearer too: an image configured with this token accepts it.
	h := client.Host{URL: url, Token: token}
	if _, err := h.Init(ctx, client.InitOptions{AccessToken: token, TimeUnixNs: time.Now().UnixNano()}); err != nil {
		return "", fmt.Errorf("setting the agent's token: %w", err)
	}
	return token, nil
}
