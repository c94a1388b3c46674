package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/codeinterp"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/envdapi"
	"github.com/rayito/rayito-agent/internal/handover"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/jupyterapi"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
)

// config is the agent's command line, section 10 of the protocol.
type config struct {
	listen      []string // TCP host:port or vsock://:PORT, each served alike
	tokenFile   string
	token       string
	stateDir    string
	maxIdle     int64
	maxHold     time.Duration
	onIdle      string
	defaultUser string
	// adminGroups' members can become root (sudo's, wheel's): the envd
	// surface serves them, and root, with the agent's rights.
	adminGroupFlag string
	adminGroups    []string
	logLevel       string
	// Resume detectors, each can be switched off.
	detectVMGenID bool
	detectVMClock bool
	detectClock   bool
	kernelCheck   time.Duration
	setClock      string // true, false or auto: see clockPolicy
	// codeInterpListen, if set, serves the code-interpreter API on a
	// second listener as well (E2B's SDK addresses port 49999).
	codeInterpListen string
	// hostListen, if set, serves the host's routes there alone: init,
	// pause, resume and upgrade leave every other listener.
	hostListen string
	// envdOpen serves the envd-compatible API without a token (unsafe).
	envdOpen bool
	// e2bAPI answers the e2b SDK's control-plane calls for this agent
	// (local development; make run).
	e2bAPI bool
	// Retention: the budget of every stream's buffers, and how many ended
	// streams stay attachable.
	retention stream.Limits
	// maxKernels bounds the Jupyter kernels running at once.
	maxKernels int
	// kernelStart bounds a kernel start.
	kernelStart time.Duration
	// origins are the web pages that may call the agent from a browser.
	origins surface.Origins
	// reseed makes every resume re-key the kernel CRNG and reseed the
	// kernels' PRNGs (clone safety).
	reseed bool
	// cgroups is --cgroups (true, false, auto: in an image); userLimits
	// the user cgroup's limits (zeros derived from the memory).
	cgroups string
	// pauseWholeVM is --pause-whole-vm (true, false, auto: in an image).
	pauseWholeVM string
	userLimits   proc.CgroupLimits
	// memoryGuard is --user-memory-guard (proc.MemoryGuard).
	memoryGuard proc.MemoryGuard
	// processGuard is --user-process-guard (proc.ProcessGuard).
	processGuard proc.ProcessGuard
	// lifecycle: hooks, the lifecycle file, stale connections.
	lifecycle lifecycleConfig
}

// addrList is a flag given once per address; the first use replaces the
// default.
type addrList struct {
	list []string
	set  bool
}

func (a *addrList) String() string { return strings.Join(a.list, ",") }

func (a *addrList) Set(v string) error {
	if !a.set {
		a.list, a.set = nil, true
	}
	a.list = append(a.list, splitList(v)...)
	return nil
}

// splitList splits a comma list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// envBool reads a boolean environment variable, or def.
func envBool(name string, def bool) bool {
	if v, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// envOr returns the environment variable's value, or def.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// maxMaxKernels is the most --max-kernels takes: past it, a typo (an
// extra zero) would leave the sandbox's memory unguarded.
const maxMaxKernels = 1024

func parseServe(args []string) (config, error) {
	var c config
	fs := commandFlags("serve", os.Stderr)
	listens := &addrList{list: splitList(envOr("RAYITO_LISTEN", "0.0.0.0:49983"))}
	fs.Var(listens, "listen", "address of the endpoint: host:port, or vsock://:PORT for vsock; give it more than once to serve on several, all alike (env RAYITO_LISTEN, a comma list)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the access token (env RAYITO_ACCESS_TOKEN holds the token itself; the flag wins)")
	fs.StringVar(&c.stateDir, "state-dir", envOr("RAYITO_STATE_DIR", "/var/lib/rayito-agent"), "directory for persisted state (env RAYITO_STATE_DIR)")
	idleDefault := envOr("RAYITO_MAX_IDLE_SECONDS", "0")
	fs.StringVar(&idleDefault, "max-idle-seconds", idleDefault, "idle policy in seconds, at least 60 (env RAYITO_MAX_IDLE_SECONDS)")
	holdDefault := envOr("RAYITO_MAX_HOLD_SECONDS", strconv.Itoa(int(traffic.DefaultMaxHold/time.Second)))
	fs.StringVar(&holdDefault, "max-hold-seconds", holdDefault, "how long a hold (keep_awake, the hold op) keeps the sandbox awake at most, in seconds, at least 1 (env RAYITO_MAX_HOLD_SECONDS)")
	fs.StringVar(&c.onIdle, "on-idle", envOr("RAYITO_ON_IDLE", ""), "command run once when the sandbox becomes idle (env RAYITO_ON_IDLE)")
	fs.StringVar(&c.defaultUser, "default-user", envOr("RAYITO_DEFAULT_USER", ""), "user for processes that name none (env RAYITO_DEFAULT_USER)")
	fs.StringVar(&c.adminGroupFlag, "admin-group", envOr("RAYITO_ADMIN_GROUP", defaultAdminGroups), "groups whose members can become root, comma-separated (sudo: Debian, Ubuntu; wheel: Fedora, Alpine, Arch): the envd API does their file operations with the agent's rights, as envd does; anyone else's run with their own rights; \"none\" leaves only root (env RAYITO_ADMIN_GROUP)")
	fs.StringVar(&c.logLevel, "log-level", envOr("RAYITO_LOG_LEVEL", "info"), "debug, info, warn or error (env RAYITO_LOG_LEVEL)")
	fs.BoolVar(&c.detectVMGenID, "detect-vmgenid", envBool("RAYITO_DETECT_VMGENID", true), "detect resumes from VMGenID change uevents (env RAYITO_DETECT_VMGENID)")
	fs.BoolVar(&c.detectVMClock, "detect-vmclock", envBool("RAYITO_DETECT_VMCLOCK", true), "detect resumes from /dev/vmclock0's generation counter (env RAYITO_DETECT_VMCLOCK)")
	checkDefault := envOr("RAYITO_KERNEL_CHECK_TIMEOUT", "auto")
	fs.StringVar(&checkDefault, "kernel-check-timeout", checkDefault, "how long a resume waits for the kernels to answer before it publishes; one alive and slower is reported slow (never lost) and waited for; auto: "+resume.DefaultKernelCheck.String()+", or "+resume.EmulatedKernelCheck.String()+" on an emulated CPU (env RAYITO_KERNEL_CHECK_TIMEOUT)")
	startDefault := envOr("RAYITO_KERNEL_START_TIMEOUT", jupyter.DefaultStartTimeout.String())
	fs.StringVar(&startDefault, "kernel-start-timeout", startDefault, "how long a kernel may take to start before the start fails; raise it under software emulation on a busy host (env RAYITO_KERNEL_START_TIMEOUT)")
	fs.StringVar(&c.codeInterpListen, "code-interpreter-listen", envOr("RAYITO_CODE_INTERPRETER_LISTEN", ""), "also serve the code-interpreter API (/execute, /contexts) on this address, such as 127.0.0.1:49999; off by default (env RAYITO_CODE_INTERPRETER_LISTEN)")
	fs.StringVar(&c.hostListen, "host-listen", envOr("RAYITO_HOST_LISTEN", ""), "serve the host's routes (health, traffic, metrics, init, pause, resume, upgrade) on this address too, such as vsock://:49984, and init, pause, resume and upgrade only there: the sandbox's programs, which hold the token, cannot reach them where they cannot reach this address; off by default (env RAYITO_HOST_LISTEN)")
	fs.BoolVar(&c.detectClock, "detect-clock-jump", envBool("RAYITO_DETECT_CLOCK_JUMP", true), "detect resumes from a jump between the RTC and the system clock (env RAYITO_DETECT_CLOCK_JUMP)")
	fs.StringVar(&c.setClock, "set-clock", envOr("RAYITO_SET_CLOCK", "auto"), "set the wall clock from the host's time_unix_ns: true, false, or auto (only in a sandbox VM image) (env RAYITO_SET_CLOCK)")
	fs.BoolVar(&c.e2bAPI, "e2b-api", envBool("RAYITO_E2B_API", false), "also answer the e2b SDK's control-plane calls (create, connect, timeout, kill) for this agent, so E2B_API_URL can point here: for local development (make run), never in an image (env RAYITO_E2B_API)")
	fs.BoolVar(&c.envdOpen, "envd-open", envBool("RAYITO_ENVD_OPEN", false), "UNSAFE: serve the envd-compatible API without an access token, to anyone who reaches the port (env RAYITO_ENVD_OPEN)")
	budgetDefault := envOr("RAYITO_RETENTION_BUDGET", "")
	fs.StringVar(&budgetDefault, "retention-budget", budgetDefault, "memory the buffers of all streams may hold together, such as 64MiB or 1GiB (env RAYITO_RETENTION_BUDGET; default a sixteenth of memory, "+stream.FormatBytes(stream.DefaultBudget())+" here)")
	keepDefault := envOr("RAYITO_KEEP_ENDED", strconv.Itoa(stream.DefaultMaxEnded))
	fs.StringVar(&keepDefault, "keep-ended", keepDefault, "how many ended streams stay attachable, the oldest expiring first (env RAYITO_KEEP_ENDED)")
	kernelsDefault := envOr("RAYITO_MAX_KERNELS", strconv.Itoa(jupyter.DefaultMaxKernels))
	fs.StringVar(&kernelsDefault, "max-kernels", kernelsDefault, "how many Jupyter kernels may run at once, on every surface together (an idle one takes about 70 MB); a start beyond it is refused with limit (env RAYITO_MAX_KERNELS)")
	fs.BoolVar(&c.reseed, "reseed-on-resume", envBool("RAYITO_RESEED_ON_RESUME", true), "on every resume, re-key the kernel CRNG and reseed the PRNGs of every Python kernel, so that sandboxes resumed from one snapshot diverge; false only to show the hazard (env RAYITO_RESEED_ON_RESUME)")
	fs.StringVar(&c.pauseWholeVM, "pause-whole-vm", envOr("RAYITO_PAUSE_WHOLE_VM", "auto"), "let a pause act on the whole machine (FIFREEZE every filesystem, drop the page cache, compact memory): true, false, or auto (in a sandbox VM image) (env RAYITO_PAUSE_WHOLE_VM)")
	fs.StringVar(&c.cgroups, "cgroups", envOr("RAYITO_CGROUPS", "auto"), "put the agent in a cgroup of its own and user work in a limited one (cgroup v2): true, false, or auto (in a sandbox VM image) (env RAYITO_CGROUPS)")
	memMax := envOr("RAYITO_USER_MEMORY_MAX", "auto")
	fs.StringVar(&memMax, "user-memory-max", memMax, "memory all user work may use together (memory.max: the OOM killer acts beyond it), such as 1GiB; auto: the machine's memory less a reserve of an eighth, at least 64 MiB, for the agent (env RAYITO_USER_MEMORY_MAX)")
	memHigh := envOr("RAYITO_USER_MEMORY_HIGH", "auto")
	fs.StringVar(&memHigh, "user-memory-high", memHigh, "where user work starts to be throttled and reclaimed (memory.high); auto: 90% of --user-memory-max where there is swap, else --user-memory-max (env RAYITO_USER_MEMORY_HIGH)")
	pidsMax := envOr("RAYITO_USER_PIDS_MAX", strconv.Itoa(proc.DefaultUserPids))
	fs.StringVar(&pidsMax, "user-pids-max", pidsMax, "how many tasks user work may have at once (pids.max: a fork beyond fails), at least 32 (env RAYITO_USER_PIDS_MAX)")
	cpuWeight := envOr("RAYITO_USER_CPU_WEIGHT", "100")
	fs.StringVar(&cpuWeight, "user-cpu-weight", cpuWeight, "user work's CPU weight, 1 to 10000, against the agent's 10000 (env RAYITO_USER_CPU_WEIGHT)")
	ioWeight := envOr("RAYITO_USER_IO_WEIGHT", "100")
	fs.StringVar(&ioWeight, "user-io-weight", ioWeight, "user work's IO weight, 1 to 10000, against the agent's 1000 (env RAYITO_USER_IO_WEIGHT)")
	guardFlag := envOr("RAYITO_USER_MEMORY_GUARD", proc.DefaultMemoryGuard.String())
	fs.StringVar(&guardFlag, "user-memory-guard", guardFlag, "kill the user process with the highest oom_score once user work has been fully stalled on memory (thrashing at its limit, which the kernel's OOM killer leaves alone) for SHARE of SPAN, such as 40%/30s; off: never (env RAYITO_USER_MEMORY_GUARD)")
	pguardFlag := envOr("RAYITO_USER_PROCESS_GUARD", proc.DefaultProcessGuard.String())
	fs.StringVar(&pguardFlag, "user-process-guard", pguardFlag, "kill a command, with everything it started, once it holds more than this many processes (a fork bomb: past a few hundred, their forks and exits queue every other exec in the sandbox behind them); off: never (env RAYITO_USER_PROCESS_GUARD)")
	originsFlag := envOr("RAYITO_ALLOWED_ORIGINS", "*")
	fs.StringVar(&originsFlag, "allowed-origins", originsFlag, "web pages that may call the agent from a browser (CORS and websocket origins): * for any, as envd, or a comma list such as https://ide.example.com; every call still needs the token (env RAYITO_ALLOWED_ORIGINS)")
	c.lifecycle.register(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := c.lifecycle.check(); err != nil {
		return c, err
	}
	groups, err := adminGroups(c.adminGroupFlag)
	if err != nil {
		return c, err
	}
	c.adminGroups = groups
	if c.pauseWholeVM != "auto" && c.pauseWholeVM != "true" && c.pauseWholeVM != "false" {
		return c, fmt.Errorf("--pause-whole-vm must be true, false or auto, got %q", c.pauseWholeVM)
	}
	if c.cgroups != "auto" && c.cgroups != "true" && c.cgroups != "false" {
		return c, fmt.Errorf("--cgroups must be true, false or auto, got %q", c.cgroups)
	}
	limits, err := parseUserLimits(memMax, memHigh, pidsMax, cpuWeight, ioWeight)
	if err != nil {
		return c, err
	}
	c.userLimits = limits
	if c.memoryGuard, err = proc.ParseMemoryGuard(guardFlag); err != nil {
		return c, fmt.Errorf("--user-memory-guard %w", err)
	}
	if c.processGuard, err = proc.ParseProcessGuard(pguardFlag); err != nil {
		return c, fmt.Errorf("--user-process-guard %w", err)
	}
	c.listen = listens.list
	// The same address twice cannot be two listeners (port 0 picks a new
	// port each time).
	if c.hostListen != "" && !strings.HasSuffix(c.hostListen, ":0") && (slices.Contains(c.listen, c.hostListen) || c.hostListen == c.codeInterpListen) {
		return c, fmt.Errorf("--host-listen %s is also a --listen or --code-interpreter-listen address: the host's routes must have a listener of their own", c.hostListen)
	}
	if len(c.listen) == 0 {
		return c, fmt.Errorf("--listen needs an address, such as 0.0.0.0:49983 or vsock://:49983")
	}
	if budgetDefault != "" {
		n, err := parseSize(budgetDefault)
		if err != nil || n < stream.MinBudget {
			return c, fmt.Errorf("--retention-budget must be a size of at least %s, such as 64MiB or 1GiB, got %q", stream.FormatBytes(stream.MinBudget), budgetDefault)
		}
		c.retention.Budget = n
	}
	keep, err := strconv.Atoi(keepDefault)
	if err != nil || keep < 1 {
		return c, fmt.Errorf("--keep-ended must be a whole number of at least 1, got %q", keepDefault)
	}
	c.retention.MaxEnded = keep
	if c.maxKernels, err = strconv.Atoi(kernelsDefault); err != nil || c.maxKernels < 1 || c.maxKernels > maxMaxKernels {
		return c, fmt.Errorf("--max-kernels must be a whole number from 1 to %d, got %q", maxMaxKernels, kernelsDefault)
	}
	if c.origins, err = surface.ParseOrigins(originsFlag); err != nil {
		return c, fmt.Errorf("--allowed-origins: %w", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	n, err := strconv.ParseInt(idleDefault, 10, 64)
	if err != nil || (n != 0 && n < traffic.MinIdleSeconds) || n < 0 || n > traffic.MaxIdleSeconds {
		return c, fmt.Errorf("--max-idle-seconds must be a whole number from %d to %d, got %q", traffic.MinIdleSeconds, traffic.MaxIdleSeconds, idleDefault)
	}
	c.maxIdle = n
	n, err = strconv.ParseInt(holdDefault, 10, 64)
	if err != nil || n < 1 || n > int64(traffic.MaxMaxHold/time.Second) {
		return c, fmt.Errorf("--max-hold-seconds must be a whole number from 1 to %d, got %q", int64(traffic.MaxMaxHold/time.Second), holdDefault)
	}
	c.maxHold = time.Duration(n) * time.Second
	if checkDefault == "auto" {
		c.kernelCheck = resume.AutoKernelCheck()
	} else if d, err := time.ParseDuration(checkDefault); err != nil || d < 10*time.Millisecond || d > 5*time.Minute {
		return c, fmt.Errorf("--kernel-check-timeout must be auto or a duration from 10ms to 5m, such as 1s or 8s, got %q", checkDefault)
	} else {
		c.kernelCheck = d
	}
	d, err := time.ParseDuration(startDefault)
	if err != nil || d < 10*time.Second || d > time.Hour {
		return c, fmt.Errorf("--kernel-start-timeout must be a duration from 10s to 1h, such as 2m or 10m, got %q", startDefault)
	}
	c.kernelStart = d
	if c.setClock != "auto" && c.setClock != "true" && c.setClock != "false" {
		return c, fmt.Errorf("--set-clock must be true, false or auto, got %q", c.setClock)
	}
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return c, fmt.Errorf("--token-file: %w", err)
		}
		c.token = strings.TrimSpace(string(b))
		if c.token == "" {
			return c, fmt.Errorf("--token-file %s is empty", c.tokenFile)
		}
	} else {
		c.token = os.Getenv("RAYITO_ACCESS_TOKEN")
	}
	return c, nil
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.EncoderConfig.TimeKey = "ts"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	// The message and fields say what went wrong; a stack of the agent's
	// own frames says nothing to the person reading the log.
	cfg.DisableStacktrace = true
	return cfg.Build()
}

func serve(args []string) int {
	cfg, err := parseServe(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "rayito-agent:", err)
		return 2
	}
	log, err := newLogger(cfg.logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rayito-agent:", err)
		return 2
	}
	defer log.Sync()
	if err := run(cfg, log); err != nil {
		var se *startupError
		if errors.As(err, &se) {
			fmt.Fprintln(os.Stderr, "rayito-agent:", err)
			return 1
		}
		log.Error("agent stopped", zap.Error(err))
		return 1
	}
	return 0
}

// hookTimeout bounds the --on-idle command.
const hookTimeout = time.Minute

// run wires the agent together and serves until SIGTERM or SIGINT:
// listeners first (a busy port fails the start before anything runs),
// then the managers, the surfaces on them, and the resume detectors.
func run(cfg config, log *zap.Logger) (err error) {
	sigs := catchSignals()
	defer signal.Stop(sigs)
	// An upgrade's state, if an agent handed this one the sandbox: until
	// this agent serves, any failure hands the sandbox back to it.
	hs, herr := handover.Take()
	if errors.Is(herr, handover.ErrNone) {
		hs, herr = nil, nil
	}
	handBack := func(why error) error {
		if hs == nil {
			return why
		}
		log.Error("cannot take over from the agent that handed over: handing back to it", zap.Error(why))
		return fmt.Errorf("%w; handing back: %v", why, hs.HandBack(os.Args, os.Environ(), why.Error()))
	}
	defer func() {
		if r := recover(); r != nil {
			err = handBack(fmt.Errorf("panic while starting: %v", r))
		}
	}()
	if herr != nil {
		return handBack(herr)
	}
	if hs != nil && handoverFault == "adopt" {
		return handBack(errors.New("this binary was built to fail as it takes over (handoverFault, a test's)"))
	}
	if err := keepInheritedFDs(); err != nil {
		log.Warn("programs may inherit descriptors the agent was started with", zap.Error(err))
	}
	nofile, _, err := raiseFDLimit()
	if err != nil {
		log.Warn("cannot raise the descriptor limit", zap.Uint64("fd_limit", nofile), zap.Error(err))
	}
	var ls []net.Listener
	var keys []string
	for i, addr := range cfg.listen {
		keys = append(keys, listenerKey(strconv.Itoa(i), addr))
		l, err := listenCarried(hs, keys[i], addr)
		if err != nil {
			for _, o := range ls {
				o.Close()
			}
			return handBack(err)
		}
		ls = append(ls, l)
	}
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ciListener net.Listener
	if cfg.codeInterpListen != "" {
		if ciListener, err = listenCarried(hs, listenerKey("ci", cfg.codeInterpListen), cfg.codeInterpListen); err != nil {
			return handBack(fmt.Errorf("--code-interpreter-listen: %w", err))
		}
		defer ciListener.Close()
	}
	var hostListener net.Listener
	if cfg.hostListen != "" {
		if hostListener, err = listenCarried(hs, listenerKey("host", cfg.hostListen), cfg.hostListen); err != nil {
			return handBack(fmt.Errorf("--host-listen: %w", err))
		}
		defer hostListener.Close()
	}
	reaper, err := proc.NewReaper()
	if err != nil {
		return fmt.Errorf("becoming a child subreaper: %w", err)
	}
	defer reaper.Close()
	cgroups, ooms := isolate(cfg, log, reaper)
	defer ooms.Close()
	// The clock jump detector, once it runs, must hear of the agent's own
	// clock changes, and a pause's auto-thaw asks it first.
	var jump atomic.Pointer[resume.ClockJumpDetector]
	wholeVM, wholeVMWhy := imagePolicy("--pause-whole-vm", cfg.pauseWholeVM, imageMarker)
	if wholeVM {
		// An agent that died during a pause left them frozen.
		resume.ThawAllFilesystems()
	}
	a, err := agent.New(agent.Config{
		Version: version, Logger: log, Token: cfg.token, Origins: cfg.origins, StateDir: cfg.stateDir,
		DefaultUser: cfg.defaultUser, AdminGroups: cfg.adminGroups, Retention: cfg.retention,
		MaxIdle: cfg.maxIdle, MaxHold: cfg.maxHold, MaxKernels: cfg.maxKernels, KernelStart: cfg.kernelStart,
		Reseed: cfg.reseed, EnvdOpen: cfg.envdOpen, E2BAPI: cfg.e2bAPI,
		Reaper: reaper, Cgroups: cgroups, SetClock: wallClock(cfg, log, &jump),
		Machine: resume.Machine{
			KernelCheck: cfg.kernelCheck, WholeVM: wholeVM, WholeVMWhy: wholeVMWhy,
			Detect: func() bool { d := jump.Load(); return d != nil && d.Check() },
			Rebaseline: func() {
				if d := jump.Load(); d != nil {
					d.Rebaseline()
				}
			},
			Hooks: cfg.lifecycle.hooks(reaper), LifecycleFile: cfg.lifecycle.lifecycleFilePath(),
			ResetTCP: resetTCP(wholeVM), StaleAfter: cfg.lifecycle.staleAfter, RepairNetwork: repairNetwork(wholeVM),
		},
		OnNewSandbox: func(string) { renewMachineID(wholeVM, log.Named("resume")) },
		Handover:     hs,
		CarryListeners: func(s *handover.State) error {
			allKeys, all := slices.Clone(keys), slices.Clone(ls)
			if ciListener != nil {
				allKeys, all = append(allKeys, listenerKey("ci", cfg.codeInterpListen)), append(all, ciListener)
			}
			if hostListener != nil {
				allKeys, all = append(allKeys, listenerKey("host", cfg.hostListen)), append(all, hostListener)
			}
			return carryListeners(s, allKeys, all)
		},
	})
	if err != nil {
		return handBack(err)
	}
	defer a.Close()
	// Every surface over the one agent (architecture.md, Surfaces).
	endpoint.Mount(a.Capabilities())
	envdapi.Mount(a.Capabilities())
	jupyterapi.Mount(a.Capabilities())
	codeinterp.Mount(a.Capabilities())
	limitMemory(a.Streams.Limits().Budget)
	srv := a.Server
	defer startDetectors(cfg, log, a, reaper, &jump)()

	if open := exposed(ls); cfg.token == "" && len(open) > 0 {
		// A sandbox's host sets the token with its first /v1/init; until
		// then whoever reaches the port first may, and take the agent.
		log.Warn("NO ACCESS TOKEN on an address other machines can reach: the first POST /v1/init from anyone sets it and takes this agent. "+
			"Give one (RAYITO_ACCESS_TOKEN or --token-file), or listen on 127.0.0.1 (--listen 127.0.0.1:49983)", zap.Strings("listen", open))
	}
	log.Info("serving", zap.String("listen", listenAddr(ls[0])), zap.String("version", version),
		zap.Uint64("fd_limit", nofile), zap.Int("max_connections", srv.MaxConns()),
		zap.Bool("token_set", cfg.token != ""), zap.String("state_dir", cfg.stateDir),
		zap.Uint64("resume_generation", a.Resumer.Generation()))
	shed := time.AfterFunc(shedAfter, func() {
		if n, err := shedStartupPages(); err != nil {
			log.Warn("cannot let go of the binary's startup pages", zap.Error(err))
		} else {
			log.Debug("let go of the binary's startup pages", zap.Int64("mapped_bytes", n))
		}
	})
	defer shed.Stop()
	serveErr := make(chan error, len(ls)+2)
	if hostListener != nil {
		// Apart before any listener serves: no HostOnly route is served
		// elsewhere, not even for a moment.
		srv.HostApart()
		log.Info("serving the host's routes", zap.String("listen", listenAddr(hostListener)))
		go func() { serveErr <- srv.ServeHost(hostOnly(hostListener, log)) }()
	}
	for i, l := range ls {
		if i > 0 {
			// Every listener serves the same routes, auth, limits and
			// traffic counting.
			log.Info("serving also", zap.String("listen", listenAddr(l)))
		}
		go func() { serveErr <- srv.Serve(l) }()
	}
	if ciListener != nil {
		log.Info("serving the code-interpreter API", zap.String("listen", listenAddr(ciListener)))
		go func() { serveErr <- srv.ServeOnly(ciListener, "codeinterp") }()
	}
	if hs != nil {
		// Serving: the sandbox is this agent's now.
		hs.Commit()
		a.FinishUpgrade()
	}
	select {
	case err = <-serveErr:
	case sig := <-sigs:
		log.Info("shutting down", zap.String("signal", sig.String()))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(ctx)
		cancel()
	}
	return err
}

// isolate puts the agent in a cgroup of its own and has every user
// process born in the user cgroup (proc.SetupCgroups), where --cgroups
// says so and the machine allows; and tells the OOM killer's victims
// apart. Neither is required: the log says once why isolation is off.
func isolate(cfg config, log *zap.Logger, reaper *proc.Reaper) (*proc.Cgroups, *proc.OOMKills) {
	var cgroups *proc.Cgroups
	on, why := imagePolicy("--cgroups", cfg.cgroups, imageMarker)
	if on {
		cgroups = proc.SetupCgroups(proc.DefaultCgroupMount, cfg.userLimits)
		why = cgroups.Off
	} else {
		cgroups = &proc.Cgroups{Off: why}
	}
	if cgroups.On() {
		l := cgroups.Limits
		log.Info("user work isolated in its cgroup", zap.String("cgroup", cgroups.UserDir()), zap.Int64("memory_max", l.MemoryMax),
			zap.Int64("memory_high", l.MemoryHigh), zap.Int64("pids_max", l.PidsMax), zap.Int("cpu_weight", l.CPUWeight),
			zap.Int64("spare_memory", proc.SpareMemory(l)))
		if cgroups.LeavesOff != "" {
			log.Info("commands share user work's CPU: no leaf cgroup of their own", zap.String("because", cgroups.LeavesOff))
		}
		if cgroups.StallOff != "" {
			log.Info("a stall of user work on memory is seen late (its 10 s average alone)", zap.String("because", cgroups.StallOff))
		}
	} else {
		log.Info("user work is not isolated: it shares the machine with the agent on equal terms", zap.String("because", why))
	}
	ooms, err := proc.WatchOOMKills()
	if err != nil {
		log.Info("the OOM killer's victims cannot be told apart: they end as killed by SIGKILL", zap.Error(err))
	}
	reaper.Isolate(cgroups, ooms)
	if err := cgroups.GuardMemory(cfg.memoryGuard, ooms, log.Named("memguard")); err != nil {
		log.Info("no memory guard: user work thrashing at its memory limit crawls there until it ends", zap.Error(err))
	}
	cgroups.GuardProcesses(cfg.processGuard, log.Named("procguard"))
	return cgroups, ooms
}

// wallClock is how the agent sets the wall clock (from /v1/init or a
// resume's time_unix_ns), if --set-clock lets it: through the clock jump
// detector once it runs, which must not take the agent's own change for a
// restore.
func wallClock(cfg config, log *zap.Logger, jump *atomic.Pointer[resume.ClockJumpDetector]) func(time.Time) error {
	setsClock, why := clockPolicy(cfg.setClock, imageMarker)
	log.Info("wall clock", zap.Bool("set_from_host", setsClock), zap.String("because", why))
	return clockSetter(setsClock, func(t time.Time) error {
		if d := jump.Load(); d != nil {
			return d.SetClock(resume.SetRealtime, t)
		}
		return resume.SetRealtime(t)
	})
}

// startDetectors starts the resume detectors and the idle hook that the
// flags ask for, and returns what stops them.
func startDetectors(cfg config, log *zap.Logger, a *agent.Agent, reaper *proc.Reaper, jump *atomic.Pointer[resume.ClockJumpDetector]) (stop func()) {
	var stops []func()
	detected := func(src resume.Source) func() {
		return func() {
			// Noticed now, not when the goroutine runs: a late report
			// must not end a pause that came after the detection.
			r := resume.Report{Source: src, NoticedAt: time.Now()}
			go a.Resumer.Resume(context.Background(), r)
		}
	}
	if cfg.detectVMGenID {
		if l, err := resume.ListenUevents(detected(resume.SourceVMGenID)); err != nil {
			log.Warn("vmgenid detector off", zap.Error(err))
		} else {
			stops = append(stops, func() { l.Close() })
		}
	}
	if cfg.detectVMClock {
		if w, err := resume.WatchVMClock("", detected(resume.SourceVMClock)); err == nil {
			stops = append(stops, func() { w.Close() })
			log.Info("vmclock detector on")
		}
	}
	if cfg.detectClock {
		d := resume.WatchClocks(nil, log.Named("resume"), detected(resume.SourceClock))
		jump.Store(d)
		stops = append(stops, func() { d.Close() })
	}
	if cfg.onIdle != "" {
		w := traffic.WatchIdle(a.Counter, func(s traffic.Snapshot) {
			body, _ := json.Marshal(s)
			st, err := reaper.RunHook(cfg.onIdle, body, hookTimeout)
			log.Info("on-idle hook ran", zap.Int("exit_code", st.ExitCode()), zap.Error(err))
		})
		stops = append(stops, func() { w.Close() })
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// limitMemory gives the Go runtime a soft memory limit of the retention
// budget plus room for the rest of the agent (unless GOMEMLIMIT sets one):
// what the agent holds is mostly retained output, and near the limit the
// collector works harder rather than let garbage double the heap, which
// is what a burst's peak is otherwise made of.
func limitMemory(budget int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(budget + 24<<20)
	}
}

// parseSize reads a size in bytes: a whole number, optionally followed by
// B, KiB, MiB or GiB (K, M, G and KB, MB, GB mean the same).
func parseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	i := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	num, unit := v, ""
	if i >= 0 {
		num, unit = v[:i], strings.TrimSpace(v[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, err
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20, "g": 30, "gb": 30, "gib": 30}
	s, ok := shift[strings.ToLower(unit)]
	if !ok || n > (1<<62)>>s {
		return 0, fmt.Errorf("bad size %q", v)
	}
	return n << s, nil
}

// parseUserLimits reads the user cgroup's limit flags ("auto" sizes
// derived from the machine's memory) and checks them against their
// floors and the machine (proc.UserLimitsFor).
func parseUserLimits(memMax, memHigh, pidsMax, cpuWeight, ioWeight string) (proc.CgroupLimits, error) {
	var l proc.CgroupLimits
	for _, sz := range []struct {
		flag, v string
		to      *int64
	}{{"--user-memory-max", memMax, &l.MemoryMax}, {"--user-memory-high", memHigh, &l.MemoryHigh}} {
		if sz.v == "auto" {
			continue
		}
		n, err := parseSize(sz.v)
		if err != nil {
			return l, fmt.Errorf("%s must be a size such as 512MiB or 2GiB, or auto, got %q", sz.flag, sz.v)
		}
		*sz.to = n
	}
	var err error
	if l.PidsMax, err = strconv.ParseInt(pidsMax, 10, 64); err != nil {
		return l, fmt.Errorf("--user-pids-max must be a whole number, got %q", pidsMax)
	}
	if l.CPUWeight, err = strconv.Atoi(cpuWeight); err != nil {
		return l, fmt.Errorf("--user-cpu-weight must be a whole number from 1 to 10000, got %q", cpuWeight)
	}
	if l.IOWeight, err = strconv.Atoi(ioWeight); err != nil || l.IOWeight < 1 {
		return l, fmt.Errorf("--user-io-weight must be a whole number from 1 to 10000, got %q", ioWeight)
	}
	if l.CPUWeight < 1 {
		return l, fmt.Errorf("--user-cpu-weight must be a whole number from 1 to 10000, got %q", cpuWeight)
	}
	if l.PidsMax < proc.MinUserPids {
		return l, fmt.Errorf("--user-pids-max must be at least %d, got %q", proc.MinUserPids, pidsMax)
	}
	return proc.UserLimitsFor(l, proc.Memory())
}

// defaultAdminGroups are the groups that give the right to become root on
// the common distributions: sudo on Debian and Ubuntu, wheel on Fedora,
// Alpine and Arch.
const defaultAdminGroups = "sudo,wheel"

// adminGroups reads --admin-group: group names separated by commas, or
// "none".
func adminGroups(flag string) ([]string, error) {
	if flag == "none" {
		return nil, nil
	}
	var out []string
	for _, g := range strings.Split(flag, ",") {
		g = strings.TrimSpace(g)
		if g == "" || strings.ContainsAny(g, ": \t\n") {
			return nil, fmt.Errorf("--admin-group must be group names separated by commas, or none, got %q", flag)
		}
		out = append(out, g)
	}
	return out, nil
}
