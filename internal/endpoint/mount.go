package endpoint

import "github.com/rayito/rayito-agent/internal/capabilities"

// Mount builds the native protocol over c's managers, mounts it on c's
// server, and makes it the way a pause tells the clients.
func Mount(c capabilities.Set) *Server {
	s := New(Config{
		Logger: c.Logger.Named("endpoint"), Version: c.Version, Streams: c.Streams, Traffic: c.Traffic,
		Procs: c.Procs, PTYs: c.PTYs, Watches: c.Watches, Kernels: c.Kernels, Files: c.Files, Cuts: c.Cuts,
		Origins: c.Origins,
	})
	c.Server.Mount(s.Surface())
	c.SetClients(s)
	return s
}
