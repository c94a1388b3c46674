// Package capabilities is what a surface is mounted with: the agent's
// managers, the server every surface shares, and the few settings the
// surfaces read. The assembly (internal/agent) builds a Set; each
// surface's Mount takes the parts it uses from it. So a surface depends on
// the capabilities, never on the assembly (its host routes, the
// lifecycle, the network), and the assembly never on a surface: the
// command, and a test, mount what they serve.
package capabilities

import (
	"context"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/watch"
)

// Set is the agent's capabilities, as the assembly built them.
type Set struct {
	Logger  *zap.Logger
	Version string
	Origins surface.Origins

	Streams  *stream.Registry
	Traffic  *traffic.Counter
	Procs    *proc.Manager
	PTYs     *ptymux.Manager
	Watches  *watch.Manager
	Kernels  *jupyter.Manager
	Files    *files.Manager
	Defaults *proc.Defaults
	// Cuts is the one registry of long-lived connections, every
	// surface's; Auth the token every surface checks.
	Cuts *surface.Cuts
	Auth *surface.Auth
	// Server is the one server every surface mounts on.
	Server *surface.Server
	// SetClients makes c the way a pause tells the clients (the native
	// surface's connections).
	SetClients func(c Clients)

	// EnvdOpen serves the envd API without a token (unsafe); E2BAPI
	// answers the e2b SDK's control-plane calls (local development).
	EnvdOpen, E2BAPI bool
}

// Clients is how a pause tells the clients that the sandbox is about to
// be paused and that it runs again: the lifecycle's view of the native
// surface (resume.Clients, said again here so that a surface need not
// compile against the lifecycle).
type Clients interface {
	Suspending(ctx context.Context, gen uint64) int
	Resumed(gen uint64, aborted bool)
}
