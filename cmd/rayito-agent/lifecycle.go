package main

import (
	"flag"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/netconf"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
)

// lifecycleConfig is what tells the sandbox's own programs of pauses,
// resumes and clones: hooks, the lifecycle file, the reset of stale
// connections.
type lifecycleConfig struct {
	hooksDir      string
	hookTimeout   time.Duration
	hooksTotal    time.Duration
	lifecycleFile string // "auto": in a sandbox VM image
	staleAfter    time.Duration
	// the flags' text, checked by check
	hookTimeoutFlag, hooksTotalFlag, staleFlag string
}

// defaultLifecycleFile is the lifecycle feed in a sandbox VM image.
const defaultLifecycleFile = "/run/rayito/lifecycle.json"

func (l *lifecycleConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&l.hooksDir, "hooks-dir", envOr("RAYITO_HOOKS_DIR", "/etc/rayito/hooks"), "lifecycle hooks: executables in DIR/pre-pause.d, post-resume.d and post-clone.d (env RAYITO_HOOKS_DIR)")
	l.hookTimeoutFlag = envOr("RAYITO_HOOK_TIMEOUT", resume.DefaultHookTimeout.String())
	fs.StringVar(&l.hookTimeoutFlag, "hook-timeout", l.hookTimeoutFlag, "how long one lifecycle hook may run before it is killed, 100ms to 10m (env RAYITO_HOOK_TIMEOUT)")
	l.hooksTotalFlag = envOr("RAYITO_HOOKS_TOTAL_TIMEOUT", resume.DefaultHooksTotal.String())
	fs.StringVar(&l.hooksTotalFlag, "hooks-total-timeout", l.hooksTotalFlag, "how long all of one event's hooks together may run: then the running one is killed and no other starts, 100ms to 10m (env RAYITO_HOOKS_TOTAL_TIMEOUT)")
	fs.StringVar(&l.lifecycleFile, "lifecycle-file", envOr("RAYITO_LIFECYCLE_FILE", "auto"), "the lifecycle feed, replaced at every pause, resume and clone: a path, off, or auto ("+defaultLifecycleFile+" in a sandbox VM image) (env RAYITO_LIFECYCLE_FILE)")
	l.staleFlag = envOr("RAYITO_STALE_CONNECTION_SECONDS", "60")
	fs.StringVar(&l.staleFlag, "stale-connection-seconds", l.staleFlag, "after a pause longer than this, reset the TCP connections user programs hold to other machines (always after a clone); 0: only after a clone (env RAYITO_STALE_CONNECTION_SECONDS)")
}

func (l *lifecycleConfig) check() error {
	d, err := time.ParseDuration(l.hookTimeoutFlag)
	if err != nil || d < 100*time.Millisecond || d > 10*time.Minute {
		return fmt.Errorf("--hook-timeout must be a duration from 100ms to 10m, such as 5s, got %q", l.hookTimeoutFlag)
	}
	l.hookTimeout = d
	if d, err = time.ParseDuration(l.hooksTotalFlag); err != nil || d < 100*time.Millisecond || d > 10*time.Minute {
		return fmt.Errorf("--hooks-total-timeout must be a duration from 100ms to 10m, such as 10s, got %q", l.hooksTotalFlag)
	}
	l.hooksTotal = d
	n, err := strconv.ParseInt(l.staleFlag, 10, 64)
	if err != nil || n < 0 || n > 30*86400 {
		return fmt.Errorf("--stale-connection-seconds must be a whole number from 0 to %d, got %q", 30*86400, l.staleFlag)
	}
	l.staleAfter = time.Duration(n) * time.Second
	return nil
}

// lifecycleFilePath is where the feed goes, "" for none.
func (l *lifecycleConfig) lifecycleFilePath() string {
	switch l.lifecycleFile {
	case "off", "":
		return ""
	case "auto":
		if on, _ := imagePolicy("--lifecycle-file", "auto", imageMarker); on {
			return defaultLifecycleFile
		}
		return ""
	}
	return l.lifecycleFile
}

// hooks runs the lifecycle hooks in the hooks' cgroup through the reaper.
func (l *lifecycleConfig) hooks(r *proc.Reaper) *resume.Hooks {
	return &resume.Hooks{Dir: l.hooksDir, Timeout: l.hookTimeout, Total: l.hooksTotal, Spawn: func(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan resume.HookExit, error) {
		pid, status, err := r.ForkExecHook(path, argv, attr)
		if err != nil {
			return 0, nil, err
		}
		exited := make(chan resume.HookExit, 1)
		go func() {
			// As a command's end says it: the code, or the signal's name.
			e := proc.ExitEnd(<-status)
			exited <- resume.HookExit{Code: e.ExitCode, Signal: e.Signal}
		}()
		return pid, exited, nil
	}}
}

// resetTCP is the reset of stale connections, where the pause may act on
// the whole VM: elsewhere (a shared machine) it would cut other people's.
func resetTCP(wholeVM bool) func() ([]resume.Conn, error) {
	if !wholeVM {
		return nil
	}
	return func() ([]resume.Conn, error) { return resume.ResetStaleTCP(resume.OwnSocketInodes()) }
}

// renewMachineID gives a clone its own machine id, in a sandbox VM only.
func renewMachineID(wholeVM bool, log *zap.Logger) {
	if !wholeVM {
		return
	}
	id, err := resume.RenewMachineID()
	if err != nil {
		log.Warn("renewing the machine id", zap.Error(err))
		return
	}
	log.Info("a new machine id for the new sandbox", zap.String("machine_id", id))
}

// repairNetwork is the network repair after a resume, in a sandbox VM
// only: on a shared machine it would announce and flush its network.
func repairNetwork(wholeVM bool) func(netconf.Facts) netconf.Report {
	if !wholeVM {
		return nil
	}
	return netconf.Repair
}
