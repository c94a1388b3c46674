// Package agent assembles the agent from its configuration: the managers
// (streams, processes, terminals, watches, kernels, files, traffic,
// resume), the HTTP server of the shared host layer with the host's
// routes, and the capabilities the surfaces mount on (Capabilities). It
// knows no surface: the command mounts each (endpoint.Mount,
// envdapi.Mount, jupyterapi.Mount, codeinterp.Mount over
// a.Capabilities()), and so do the tests (agenttest), so what a test
// serves is what a sandbox runs, not a copy of its wiring.
//
// What acts on the machine as a whole (becoming the child subreaper,
// isolating user work in its cgroup, the resume detectors, the clock and
// the lifecycle hooks) the command decides and hands in; the tests leave
// it off or give their own.
package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/capabilities"
	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/handover"
	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/users"
	"github.com/rayito/rayito-agent/internal/watch"
)

// Config is what the agent is built from (the command's flags, section 10
// of the protocol, less what acts on the machine as a whole).
type Config struct {
	Version string
	Logger  *zap.Logger // nil: none
	// Token is the access token; "" lets the first /v1/init set one.
	Token   string
	Origins surface.Origins
	// StateDir keeps what outlives the agent's process (resume state,
	// upload journals).
	StateDir    string
	DefaultUser string
	// AdminGroups' members can become root: the envd surface serves
	// them, and root, with the agent's rights.
	AdminGroups []string
	Retention   stream.Limits
	MaxIdle     int64         // seconds; 0: the default
	MaxHold     time.Duration // 0: traffic.DefaultMaxHold
	MaxKernels  int
	KernelStart time.Duration
	// Reseed re-keys the CRNG and reseeds the kernels on every resume.
	Reseed bool
	// EnvdOpen serves the envd API without a token (unsafe); E2BAPI
	// answers the e2b SDK's control-plane calls (local development).
	EnvdOpen, E2BAPI bool

	// Reaper reaps every process the agent starts: one per process,
	// required.
	Reaper *proc.Reaper
	// Counter counts the endpoint's traffic; nil: a new one (tests give
	// one on a settable clock).
	Counter *traffic.Counter
	// Cgroups is the user cgroup, or why there is none; nil: none.
	Cgroups *proc.Cgroups
	// SetClock sets the wall clock from the host's time, or says why it
	// does not; nil: it never does.
	SetClock func(time.Time) error
	// Machine is what the machine offers the lifecycle (the kernel check's
	// bound, the whole VM, hooks, the lifecycle file, the network, the
	// clock jump detector); New wires the agent's managers beside it.
	Machine resume.Machine
	// OnNewSandbox runs, beside the agent's own renewal, when the host
	// names another sandbox (a new machine id).
	OnNewSandbox func(id string)
	// CutHook, if set, runs in a resume between the publication of the
	// new generation and the cut (tests).
	CutHook func()
	// Handover is the state an upgrade handed this agent (nil: a fresh
	// start): New adopts it. CarryListeners puts the listeners in the
	// state of an upgrade this agent hands over (the command owns them).
	Handover       *handover.State
	CarryListeners func(*handover.State) error
}

// Agent is the agent assembled: its managers, and the server its surfaces
// are mounted on.
type Agent struct {
	Streams  *stream.Registry
	Accounts *users.Accounts
	Defaults *proc.Defaults
	Procs    *proc.Manager
	PTYs     *ptymux.Manager
	Watches  *watch.Manager
	Kernels  *jupyter.Manager
	Files    *files.Manager
	Counter  *traffic.Counter
	Resumer  *resume.Manager
	// Cuts is the one registry of long-lived connections, every surface's.
	Cuts *surface.Cuts
	Auth *surface.Auth
	// Server serves every surface; Shutdown it before Close.
	Server *surface.Server
	Host   *hostapi.API
	// Config is what the agent was built from, for the surfaces that
	// mount themselves on it.
	Config Config

	clients  clientsHolder // the native surface's, for the pause's notices
	giveBack *traffic.BurstWatcher
	cgroups  *proc.Cgroups
	setClock func(time.Time) error
	adopted  *resume.Adopted // an upgrade taken over, until FinishUpgrade
	log      *zap.Logger
}

// New builds the agent: the managers, the resume manager over them, and
// every surface mounted on one server. On an error what was built is
// closed.
func New(cfg Config) (a *Agent, err error) {
	if cfg.Reaper == nil {
		return nil, errors.New("agent: a reaper is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Cgroups == nil {
		cfg.Cgroups = &proc.Cgroups{Off: "not asked for"}
	}
	a = &Agent{Config: cfg, cgroups: cfg.Cgroups, log: cfg.Logger}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err := a.buildManagers(cfg); err != nil {
		return nil, err
	}
	a.buildSurfaces(cfg)
	if cfg.Handover != nil {
		if err := a.adopt(cfg.Handover); err != nil {
			return nil, fmt.Errorf("taking over from the agent that handed over: %w", err)
		}
	}
	return a, nil
}

// buildManagers builds the capabilities and the resume manager over them.
func (a *Agent) buildManagers(cfg Config) error {
	log := cfg.Logger
	a.Streams = stream.NewRegistryWith(cfg.Retention)
	// The accounts are one capability: commands, terminals, kernels and
	// file operations resolve users, and the default user, through them.
	a.Accounts = users.New()
	a.Defaults = &proc.Defaults{Accounts: a.Accounts}
	a.Defaults.Set(cfg.DefaultUser, "", nil)
	a.Procs = proc.NewManager(a.Streams, cfg.Reaper, a.Defaults, log.Named("proc"))
	a.Counter = cfg.Counter
	if a.Counter == nil {
		a.Counter = traffic.NewCounter()
	}
	if cfg.MaxIdle != 0 {
		if err := a.Counter.SetMaxIdle(cfg.MaxIdle); err != nil {
			return err
		}
	}
	if cfg.MaxHold != 0 {
		if err := a.Counter.Holds().SetMax(cfg.MaxHold); err != nil {
			return err
		}
	}
	a.giveBack = traffic.WatchBursts(a.Counter, giveBackAfter, giveMemoryBack)
	a.PTYs = ptymux.NewManager(a.Streams, cfg.Reaper, a.Defaults, log.Named("pty"))
	a.Watches = watch.NewManagerWith(a.Streams, watch.ManagerOptions{Logger: log.Named("watch"), IsTemp: files.IsTemp})
	a.Kernels = jupyter.NewManager(jupyter.Options{
		Registry: a.Streams, Reaper: cfg.Reaper, Defaults: a.Defaults, Logger: log, Reseed: cfg.Reseed,
		MaxKernels: cfg.MaxKernels, StartTimeout: cfg.KernelStart,
		OnChange: func() {
			if a.Resumer != nil {
				a.Resumer.KernelsChanged()
			}
		},
		OnLost: func(kernel string) {
			if a.Resumer != nil {
				a.Resumer.KernelLost(kernel)
			}
		},
	})
	// The resume manager cuts what every surface registers here, and
	// the registry reads the generation the manager publishes.
	a.Cuts = surface.NewCuts(func() uint64 { return a.Resumer.Generation() })
	ro := resume.Options{Machine: cfg.Machine, StateDir: cfg.StateDir, Logger: log.Named("resume"), Reseed: cfg.Reseed}
	ro.Sessions = a.Cuts
	if hook := cfg.CutHook; hook != nil {
		ro.Sessions = cutsFunc(func(ctx context.Context, gen uint64) {
			hook()
			a.Cuts.CutForResume(ctx, gen)
		})
	}
	a.setClock = cfg.SetClock
	if a.setClock == nil {
		a.setClock = func(time.Time) error { return errNoClock }
	}
	ro.SetClock = a.setClock
	ro.Kernels, ro.KernelReseed = kernelHealth{a.Kernels}, kernelHealth{a.Kernels}
	ro.OnResume = a.Counter.Resumed
	ro.OnNewSandbox = a.newSandbox(cfg.OnNewSandbox)
	ro.Clients = &a.clients
	ro.UserWork, ro.UserWorkOff = a.userWork(cfg.Reaper), a.cgroups.Off
	ro.Version, ro.Handover = cfg.Version, handoverParts{a}
	var err error
	if a.Resumer, err = resume.New(ro); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if a.Files, err = files.New(files.Options{Registry: a.Streams, Users: a.Accounts, StateDir: cfg.StateDir, Logger: log.Named("files"), AdminGroups: cfg.AdminGroups}); err != nil {
		return fmt.Errorf("files: %w", err)
	}
	if len(cfg.AdminGroups) > 0 && !slices.ContainsFunc(cfg.AdminGroups, func(g string) bool { _, err := a.Accounts.GID(g); return err == nil }) {
		log.Info("no admin group here: the envd API does only root's file operations with the agent's rights", zap.Strings("admin_groups", cfg.AdminGroups))
	}
	var earlier []string
	for _, k := range a.Resumer.State().Kernels {
		earlier = append(earlier, k.Kernel)
	}
	a.Kernels.SkipIDs(earlier)
	return nil
}

// giveBackAfter is the burst after which the agent gives the memory it
// left behind back to the system (giveMemoryBack): 16 MiB over any
// surface, then a second with no byte. The stream registry returns what
// retained output held as soon as it is let go of; this covers the rest,
// the garbage each surface's encoding makes of a large transfer, which
// would otherwise stay resident until the runtime's forced collection two
// minutes later. A collection of the agent's small heap takes a
// millisecond or two; this runs at most once a second and never while
// bytes cross.
var giveBackAfter = traffic.Burst{MinBytes: 16 << 20, Quiet: time.Second}

// giveMemoryBack collects twice, then returns every free page: what
// sync.Pools hold (the Connect codec's message buffers, a megabyte each
// after large requests) outlives one collection in the pools' victim
// cache, and is only free after the second.
func giveMemoryBack() {
	runtime.GC()
	debug.FreeOSMemory()
}

// errNoClock is what setting the clock answers where nobody said how.
var errNoClock = errors.New("the agent does not set the clock here")

// cutsFunc adapts a function to resume.Sessions.
type cutsFunc func(ctx context.Context, gen uint64)

func (f cutsFunc) CutForResume(ctx context.Context, gen uint64) { f(ctx, gen) }

// newSandbox renews the agent's identity when the host names another
// sandbox than the last: a new instance id, the template's ended streams,
// retained output and leases gone; running processes, terminals, watches
// and kernels stay (they are part of the template).
func (a *Agent) newSandbox(also func(string)) func(string) {
	log := a.log.Named("resume")
	return func(id string) {
		if also != nil {
			also(id)
		}
		old, current := a.Streams.Renew()
		leases := a.Counter.Holds().DropLeases()
		log.Info("new identity for a new sandbox", zap.String("instance", current), zap.String("previous_instance", old), zap.Int("leases_dropped", leases))
	}
}

// userWork is what a pause freezes: the user cgroup, nil when off.
func (a *Agent) userWork(r *proc.Reaper) resume.UserWork {
	if !a.cgroups.On() {
		return nil
	}
	return proc.NewUserWork(a.cgroups, r)
}

// SetClients gives the pause its way to the clients' connections (the
// native surface's, which mounts after the resume manager is built).
func (a *Agent) SetClients(c resume.Clients) { a.clients.set(c) }

// Capabilities is what a surface is mounted with (package capabilities).
func (a *Agent) Capabilities() capabilities.Set {
	cfg := a.Config
	return capabilities.Set{
		Logger: cfg.Logger, Version: cfg.Version, Origins: cfg.Origins,
		Streams: a.Streams, Traffic: a.Counter, Procs: a.Procs, PTYs: a.PTYs, Watches: a.Watches,
		Kernels: a.Kernels, Files: a.Files, Defaults: a.Defaults, Cuts: a.Cuts, Auth: a.Auth, Server: a.Server,
		SetClients: func(c capabilities.Clients) { a.SetClients(c) }, EnvdOpen: cfg.EnvdOpen, E2BAPI: cfg.E2BAPI,
	}
}

// buildSurfaces makes the one server the surfaces mount on, with the
// host's routes. The surfaces share its token, limits and the registry of
// long-lived connections.
func (a *Agent) buildSurfaces(cfg Config) {
	log := cfg.Logger
	a.Auth = surface.NewAuth(cfg.Token)
	a.Server = surface.New(surface.Options{Logger: log.Named("http"), Auth: a.Auth, Traffic: a.Counter, Origins: cfg.Origins})
	a.Host = hostapi.New(hostapi.Config{
		Logger: log.Named("host"), Version: cfg.Version, Auth: a.Auth, Streams: a.Streams, Traffic: a.Counter,
		Resume: a.Resumer, Pause: a.Resumer, Upgrade: a.Resumer, Defaults: a.Defaults, SetClock: a.setClock, Conns: a.Server.Conns,
		Metrics: a.metrics(cfg.Reaper), Isolation: a.cgroups.Isolation,
	})
	a.Server.Mount(a.Host.Surface())
}

// Close stops the producers (kernels politely, then terminals and
// commands) and what holds their output. The reaper is the caller's.
func (a *Agent) Close() {
	if a.Kernels != nil {
		a.Kernels.Close()
	}
	if a.PTYs != nil {
		a.PTYs.Close()
	}
	if a.Procs != nil {
		a.Procs.Close()
	}
	if a.Watches != nil {
		a.Watches.Close()
	}
	if a.Files != nil {
		a.Files.Close()
	}
	if a.giveBack != nil {
		a.giveBack.Close()
	}
	if a.Counter != nil {
		a.Counter.Close()
	}
	if a.Streams != nil {
		a.Streams.Close()
	}
}
