package codeinterp

import "github.com/rayito/rayito-agent/internal/agent"

// Mount builds the code interpreter's API over a's kernels and mounts it
// on a's server.
func Mount(a *agent.Agent) *Server {
	s := New(Options{Kernels: a.Kernels, Cuts: a.Cuts, Logger: a.Config.Logger})
	a.Server.Mount(s.Surface())
	return s
}
