package codeinterp

import "github.com/rayito/rayito-agent/internal/capabilities"

// Mount builds the code interpreter's API over c's kernels and mounts it
// on c's server.
func Mount(c capabilities.Set) *Server {
	s := New(Options{Kernels: c.Kernels, Cuts: c.Cuts, Logger: c.Logger})
	c.Server.Mount(s.Surface())
	return s
}
