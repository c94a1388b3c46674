package jupyterapi

import "github.com/rayito/rayito-agent/internal/capabilities"

// Mount builds jupyter_server's API over c's kernels and mounts it on c's
// server.
func Mount(c capabilities.Set) *Server {
	s := New(Options{Kernels: c.Kernels, Traffic: c.Traffic, Cuts: c.Cuts, Logger: c.Logger, Origins: c.Origins})
	c.Server.Mount(s.Surface())
	return s
}
