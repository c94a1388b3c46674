package main

import (
	"context"
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// supervisor keeps one program running. It starts the program through the
// reaper (the only caller of wait4 in the init), waits for its exit status
// and starts it again after a backoff. run owns the child: when its context
// ends it stops the child (SIGTERM to the process group, then SIGKILL after
// stopGrace) and returns once the child is gone.
type supervisor struct {
	path    string
	argv    []string
	env     []string
	files   []uintptr // stdin, stdout, stderr of the child
	reaper  *proc.Reaper
	log     *zap.Logger
	backoff backoff
	// stopGrace is how long the child gets between SIGTERM and SIGKILL.
	stopGrace time.Duration
	// onStart runs after each start, with the new pid.
	onStart func(pid int)
}

// run starts the program and restarts it until ctx is done.
func (s *supervisor) run(ctx context.Context) {
	for {
		started := time.Now()
		pid, exited, err := s.reaper.ForkExec(s.path, s.argv, &syscall.ProcAttr{
			Dir:   "/",
			Env:   s.env,
			Files: s.files,
			Sys:   &syscall.SysProcAttr{Setsid: true},
		})
		if err != nil {
			s.log.Error("start failed", zap.String("path", s.path), zap.Error(err))
		} else {
			s.log.Info("started", zap.String("path", s.path), zap.Int("pid", pid))
			if s.onStart != nil {
				s.onStart(pid)
			}
			select {
			case st := <-exited:
				s.log.Warn("exited", zap.Int("pid", pid), zap.Int("code", st.ExitCode()),
					zap.Stringer("status", waitStatus(st.Wait)), zap.Duration("ran", time.Since(started)))
			case <-ctx.Done():
				s.stop(pid, exited)
				return
			}
		}
		delay := s.backoff.next(time.Since(started))
		s.log.Info("restarting", zap.Duration("in", delay))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

func (s *supervisor) stop(pid int, exited <-chan proc.Status) {
	signalGroup(pid, unix.SIGTERM)
	t := time.NewTimer(s.stopGrace)
	defer t.Stop()
	select {
	case <-exited:
		return
	case <-t.C:
	}
	s.log.Warn("did not stop in time; killing", zap.Int("pid", pid))
	signalGroup(pid, unix.SIGKILL)
	<-exited
}

// signalGroup signals the child's process group (it is a session leader),
// falling back to the pid if the group is already gone.
func signalGroup(pid int, sig unix.Signal) {
	if err := unix.Kill(-pid, sig); errors.Is(err, unix.ESRCH) {
		_ = unix.Kill(pid, sig)
	}
}

// protectFromOOM makes the OOM killer pick anything but pid. Processes the
// agent starts inherit the value unless it resets it for them.
func protectFromOOM(log *zap.Logger) func(pid int) {
	return func(pid int) {
		path := "/proc/" + strconv.Itoa(pid) + "/oom_score_adj"
		if err := os.WriteFile(path, []byte("-1000"), 0); err != nil {
			log.Warn("oom_score_adj", zap.Int("pid", pid), zap.Error(err))
		}
	}
}

type waitStatus unix.WaitStatus

func (w waitStatus) String() string {
	ws := unix.WaitStatus(w)
	switch {
	case ws.Exited():
		return "exit " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		return "signal " + ws.Signal().String()
	default:
		return "status " + strconv.Itoa(int(w))
	}
}
