package jupyterapi

import "github.com/rayito/rayito-agent/internal/agent"

// Mount builds jupyter_server's API over a's kernels and mounts it on a's
// server.
func Mount(a *agent.Agent) *Server {
	s := New(Options{Kernels: a.Kernels, Traffic: a.Counter, Cuts: a.Cuts, Logger: a.Config.Logger, Origins: a.Config.Origins})
	a.Server.Mount(s.Surface())
	return s
}
