package proc

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// RunHook runs a host-configured command with `/bin/sh -c`, gives it stdin,
// and waits for it (killing its group after timeout). Hooks are not
// streams: nobody attaches to them, so their output goes to the agent's
// own stderr, where the image's log collection picks it up.
func (r *Reaper) RunHook(command string, stdin []byte, timeout time.Duration) (Status, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return Status{}, err
	}
	attr := &syscall.ProcAttr{
		Env:   cleanEnviron(),
		Files: []uintptr{pr.Fd(), os.Stderr.Fd(), os.Stderr.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	pid, status, err := r.ForkExec("/bin/sh", []string{"/bin/sh", "-c", command}, attr)
	pr.Close()
	if err != nil {
		pw.Close()
		return Status{}, fmt.Errorf("starting hook: %w", err)
	}
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		pw.Write(stdin)
		pw.Close()
	}()
	// A job the hook left behind may hold its stdin without reading: once
	// the hook is done, closing the pipe ends the write.
	defer func() {
		pw.Close()
		<-fed
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case st := <-status:
		return st, nil
	case <-t.C:
		r.Kill(pid, syscall.SIGKILL, true)
		return <-status, fmt.Errorf("hook timed out after %s", timeout)
	}
}
