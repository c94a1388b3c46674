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
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rayito/rayito-agent/internal/codeinterp"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/envdapi"
	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/jupyterapi"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/watch"
)

// config is the agent's command line, section 10 of the protocol.
type config struct {
	listen      string
	tokenFile   string
	token       string
	stateDir    string
	maxIdle     int64
	maxHold     time.Duration
	onIdle      string
	defaultUser string
	logLevel    string
	// Resume detectors, each can be switched off.
	detectVMGenID bool
	detectVMClock bool
	detectClock   bool
	kernelCheck   time.Duration
	setClock      string // true, false or auto: see clockPolicy
	// codeInterpListen, if set, serves the code-interpreter API on a
	// second listener as well (E2B's SDK addresses port 49999).
	codeInterpListen string
	// envdOpen serves the envd-compatible API without a token (unsafe).
	envdOpen bool
	// Retention: the budget of every stream's buffers, and how many ended
	// streams stay attachable.
	retention stream.Limits
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

func parseServe(args []string) (config, error) {
	var c config
	fs := commandFlags("serve", os.Stderr)
	fs.StringVar(&c.listen, "listen", envOr("RAYITO_LISTEN", "0.0.0.0:49983"), "address of the endpoint (env RAYITO_LISTEN)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the access token (env RAYITO_ACCESS_TOKEN holds the token itself; the flag wins)")
	fs.StringVar(&c.stateDir, "state-dir", envOr("RAYITO_STATE_DIR", "/var/lib/rayito-agent"), "directory for persisted state (env RAYITO_STATE_DIR)")
	idleDefault := envOr("RAYITO_MAX_IDLE_SECONDS", "0")
	fs.StringVar(&idleDefault, "max-idle-seconds", idleDefault, "idle policy in seconds, at least 60 (env RAYITO_MAX_IDLE_SECONDS)")
	holdDefault := envOr("RAYITO_MAX_HOLD_SECONDS", strconv.Itoa(int(traffic.DefaultMaxHold/time.Second)))
	fs.StringVar(&holdDefault, "max-hold-seconds", holdDefault, "how long a hold (keep_awake, the hold op) keeps the sandbox awake at most, in seconds, at least 1 (env RAYITO_MAX_HOLD_SECONDS)")
	fs.StringVar(&c.onIdle, "on-idle", envOr("RAYITO_ON_IDLE", ""), "command run once when the sandbox becomes idle (env RAYITO_ON_IDLE)")
	fs.StringVar(&c.defaultUser, "default-user", envOr("RAYITO_DEFAULT_USER", ""), "user for processes that name none (env RAYITO_DEFAULT_USER)")
	fs.StringVar(&c.logLevel, "log-level", envOr("RAYITO_LOG_LEVEL", "info"), "debug, info, warn or error (env RAYITO_LOG_LEVEL)")
	fs.BoolVar(&c.detectVMGenID, "detect-vmgenid", envBool("RAYITO_DETECT_VMGENID", true), "detect resumes from VMGenID change uevents (env RAYITO_DETECT_VMGENID)")
	fs.BoolVar(&c.detectVMClock, "detect-vmclock", envBool("RAYITO_DETECT_VMCLOCK", true), "detect resumes from /dev/vmclock0's generation counter (env RAYITO_DETECT_VMCLOCK)")
	checkDefault := envOr("RAYITO_KERNEL_CHECK_TIMEOUT", resume.DefaultKernelCheck.String())
	fs.StringVar(&checkDefault, "kernel-check-timeout", checkDefault, "how long a resume waits for a kernel to answer before reporting it lost; raise it under software emulation (env RAYITO_KERNEL_CHECK_TIMEOUT)")
	fs.StringVar(&c.codeInterpListen, "code-interpreter-listen", envOr("RAYITO_CODE_INTERPRETER_LISTEN", ""), "also serve the code-interpreter API (/execute, /contexts) on this address, such as 127.0.0.1:49999; off by default (env RAYITO_CODE_INTERPRETER_LISTEN)")
	fs.BoolVar(&c.detectClock, "detect-clock-jump", envBool("RAYITO_DETECT_CLOCK_JUMP", true), "detect resumes from a jump between the RTC and the system clock (env RAYITO_DETECT_CLOCK_JUMP)")
	fs.StringVar(&c.setClock, "set-clock", envOr("RAYITO_SET_CLOCK", "auto"), "set the wall clock from the host's time_unix_ns: true, false, or auto (only in a sandbox VM image) (env RAYITO_SET_CLOCK)")
	fs.BoolVar(&c.envdOpen, "envd-open", envBool("RAYITO_ENVD_OPEN", false), "UNSAFE: serve the envd-compatible API without an access token, to anyone who reaches the port (env RAYITO_ENVD_OPEN)")
	budgetDefault := envOr("RAYITO_RETENTION_BUDGET", "")
	fs.StringVar(&budgetDefault, "retention-budget", budgetDefault, "memory the buffers of all streams may hold together, such as 64MiB or 1GiB (env RAYITO_RETENTION_BUDGET; default a sixteenth of memory, "+stream.FormatBytes(stream.DefaultBudget())+" here)")
	keepDefault := envOr("RAYITO_KEEP_ENDED", strconv.Itoa(stream.DefaultMaxEnded))
	fs.StringVar(&keepDefault, "keep-ended", keepDefault, "how many ended streams stay attachable, the oldest expiring first (env RAYITO_KEEP_ENDED)")
	if err := fs.Parse(args); err != nil {
		return c, err
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
	d, err := time.ParseDuration(checkDefault)
	if err != nil || d < 10*time.Millisecond || d > 5*time.Minute {
		return c, fmt.Errorf("--kernel-check-timeout must be a duration from 10ms to 5m, such as 1s or 8s, got %q", checkDefault)
	}
	c.kernelCheck = d
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

// run wires the agent together and serves until SIGTERM or SIGINT.
func run(cfg config, log *zap.Logger) error {
	sigs := catchSignals()
	defer signal.Stop(sigs)
	if err := keepInheritedFDs(); err != nil {
		log.Warn("programs may inherit descriptors the agent was started with", zap.Error(err))
	}
	nofile, _, err := raiseFDLimit()
	if err != nil {
		log.Warn("cannot raise the descriptor limit", zap.Uint64("fd_limit", nofile), zap.Error(err))
	}
	l, err := listen(cfg.listen)
	if err != nil {
		return err
	}
	defer l.Close()
	var ciListener net.Listener
	if cfg.codeInterpListen != "" {
		if ciListener, err = listen(cfg.codeInterpListen); err != nil {
			return fmt.Errorf("--code-interpreter-listen: %w", err)
		}
		defer ciListener.Close()
	}
	reaper, err := proc.NewReaper()
	if err != nil {
		return fmt.Errorf("becoming a child subreaper: %w", err)
	}
	defer reaper.Close()
	streams := stream.NewRegistryWith(cfg.retention)
	defer streams.Close()
	limitMemory(streams.Limits().Budget)
	defaults := &proc.Defaults{}
	defaults.Set(cfg.defaultUser, "", nil)
	procs := proc.NewManager(streams, reaper, defaults, log.Named("proc"))
	counter := traffic.NewCounter()
	defer counter.Close()
	if err := counter.SetMaxIdle(cfg.maxIdle); err != nil {
		return err
	}
	if err := counter.Holds().SetMax(cfg.maxHold); err != nil {
		return err
	}

	ptys := ptymux.NewManager(streams, reaper, defaults, log.Named("pty"))
	watches := watch.NewManager(streams, log.Named("watch"))
	var resumer *resume.Manager
	kernels := jupyter.NewManager(jupyter.Options{
		Registry: streams, Reaper: reaper, Defaults: defaults, Logger: log,
		OnChange: func() {
			if resumer != nil {
				resumer.KernelsChanged()
			}
		},
	})

	var clockJump *resume.ClockJumpDetector
	setsClock, why := clockPolicy(cfg.setClock, imageMarker)
	log.Info("wall clock", zap.Bool("set_from_host", setsClock), zap.String("because", why))
	setClock := clockSetter(setsClock, func(t time.Time) error {
		if clockJump != nil {
			return clockJump.SetClock(resume.SetRealtime, t)
		}
		return resume.SetRealtime(t)
	})
	// The endpoint and the resume manager need each other: the manager
	// cuts the endpoint's sessions, the endpoint forwards host reports.
	// Every other surface that holds connections joins cut as well.
	var srv *endpoint.Server
	cut := &surfaces{sessionsFunc(func(ctx context.Context, gen uint64) { srv.CutForResume(ctx, gen) })}
	resumer, err = resume.New(resume.Options{
		StateDir: cfg.stateDir, Sessions: cut, SetClock: setClock, Kernels: kernelHealth{kernels},
		OnResume: counter.Resumed, KernelCheck: cfg.kernelCheck, Logger: log.Named("resume"),
	})
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	fileMgr, err := files.New(files.Options{
		Registry: streams, Defaults: defaults, StateDir: cfg.stateDir, Logger: log.Named("files"),
		EndCode: func(err error) string { return string(endpoint.FileErrorCode(err)) },
	})
	if err != nil {
		return fmt.Errorf("files: %w", err)
	}
	defer fileMgr.Close()
	var earlier []string
	for _, k := range resumer.State().Kernels {
		earlier = append(earlier, k.Kernel)
	}
	kernels.SkipIDs(earlier)
	auth := endpoint.NewAuth(cfg.token)
	srv = endpoint.New(endpoint.Config{
		Logger:   log.Named("endpoint"),
		Version:  version,
		Auth:     auth,
		Streams:  streams,
		Traffic:  counter,
		Procs:    procs,
		PTYs:     ptys,
		Watches:  watches,
		Kernels:  kernels,
		Files:    fileMgr,
		Resume:   resumer,
		Defaults: defaults,
		SetClock: setClock,
		Metrics: func(m *endpoint.MetricsWriter) {
			m.Metric("rayito_orphans_reaped_total", "counter", "Orphaned descendants reaped.", "", float64(reaper.Orphans()))
			b := streams.Budget().Stats()
			m.Metric("rayito_retention_budget_bytes", "gauge", "Memory the buffers of all streams may hold together.", "", float64(b.Limit))
			m.Metric("rayito_retention_used_bytes", "gauge", "Retention budget in use: held by streams, or set aside by running ones.", "", float64(b.Used))
			m.Metric("rayito_retention_ended_bytes", "gauge", "Memory held by ended streams.", "", float64(b.Ended))
			m.Metric("rayito_streams_expired_total", "counter", "Ended streams that expired (by count, bytes, time or memory pressure).", "", float64(streams.Expired()))
		},
	})
	envd := envdapi.New(envdapi.Config{
		Logger: log.Named("envd"), Auth: auth, Streams: streams, Procs: procs, PTYs: ptys,
		Watches: watches, Users: defaults, Files: fileMgr, Traffic: counter, Generation: resumer.Generation, Open: cfg.envdOpen,
	})
	envd.Mount(srv)
	*cut = append(*cut, envd)
	if cfg.envdOpen {
		log.Warn("the envd API is open: anyone who reaches the port can run commands without a token")
	}

	// The Jupyter and code-interpreter surfaces share the listener and
	// the token; a resume cuts their connections too.
	jupyterAPI := jupyterapi.New(jupyterapi.Options{Kernels: kernels, Auth: auth, Traffic: counter, Logger: log})
	codeInterp := codeinterp.New(codeinterp.Options{Kernels: kernels, Auth: auth, Traffic: counter, Logger: log})
	for _, p := range jupyterAPI.Patterns() {
		srv.Mount(p, jupyterAPI)
	}
	for _, p := range codeInterp.Patterns() {
		srv.Mount(p, codeInterp)
	}
	*cut = append(*cut, jupyterAPI, codeInterp)

	detected := func(src resume.Source) func() {
		return func() { go resumer.Resume(context.Background(), resume.Report{Source: src}) }
	}
	if cfg.detectVMGenID {
		if l, err := resume.ListenUevents(detected(resume.SourceVMGenID)); err != nil {
			log.Warn("vmgenid detector off", zap.Error(err))
		} else {
			defer l.Close()
		}
	}
	if cfg.detectVMClock {
		if w, err := resume.WatchVMClock("", detected(resume.SourceVMClock)); err == nil {
			defer w.Close()
			log.Info("vmclock detector on")
		}
	}
	if cfg.detectClock {
		clockJump = resume.WatchClocks(nil, log.Named("resume"), detected(resume.SourceClock))
		defer clockJump.Close()
	}
	if cfg.onIdle != "" {
		w := traffic.WatchIdle(counter, func(s traffic.Snapshot) {
			body, _ := json.Marshal(s)
			st, err := reaper.RunHook(cfg.onIdle, body, hookTimeout)
			log.Info("on-idle hook ran", zap.Int("exit_code", st.ExitCode()), zap.Error(err))
		})
		defer w.Close()
	}

	log.Info("serving", zap.String("listen", l.Addr().String()), zap.String("version", version),
		zap.Uint64("fd_limit", nofile), zap.Int("max_connections", endpoint.ConnLimitFor(nofile)),
		zap.Bool("token_set", cfg.token != ""), zap.String("state_dir", cfg.stateDir),
		zap.Uint64("resume_generation", resumer.Generation()))

	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(l) }()
	if ciListener != nil {
		log.Info("serving the code-interpreter API", zap.String("listen", ciListener.Addr().String()))
		go func() {
			if err := srv.ServeAlso(ciListener, codeInterp); err != nil {
				serveErr <- err
			}
		}()
	}
	select {
	case err = <-serveErr:
	case sig := <-sigs:
		log.Info("shutting down", zap.String("signal", sig.String()))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(ctx)
		cancel()
	}
	jupyterAPI.Close()
	// Stop producers: kernels politely, then terminals and commands.
	kernels.Close()
	ptys.Close()
	procs.Close()
	watches.Close()
	return err
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

// kernelHealth adapts the Jupyter manager to what the resume sequence and
// /health need.
type kernelHealth struct{ m *jupyter.Manager }

func (k kernelHealth) Check(ctx context.Context) []resume.KernelHealth {
	k.m.Check(ctx)
	return k.List()
}

func (k kernelHealth) List() []resume.KernelHealth {
	var out []resume.KernelHealth
	for _, info := range k.m.List() {
		state := "alive"
		switch info.State {
		case jupyter.StateDead:
			state = "dead"
		case jupyter.StateLost:
			state = "lost"
		}
		out = append(out, resume.KernelHealth{Kernel: info.Kernel, State: state})
	}
	return out
}

// surfaces are everything holding connections that a resume cuts: the
// native endpoint and each adapter. They are cut concurrently, so each
// gets the whole of the sequence's bound.
type surfaces []resume.Sessions

func (ss *surfaces) CutForResume(ctx context.Context, gen uint64) {
	var wg sync.WaitGroup
	for _, s := range *ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.CutForResume(ctx, gen)
		}()
	}
	wg.Wait()
}

// sessionsFunc adapts a function to resume.Sessions.
type sessionsFunc func(ctx context.Context, gen uint64)

func (f sessionsFunc) CutForResume(ctx context.Context, gen uint64) { f(ctx, gen) }
