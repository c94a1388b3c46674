package endpoint

import "github.com/rayito/rayito-agent/internal/agent"

// Mount builds the native protocol over a's managers, mounts it on a's
// server, and makes it the way a pause tells the clients.
func Mount(a *agent.Agent) *Server {
	cfg := a.Config
	s := New(Config{
		Logger: cfg.Logger.Named("endpoint"), Version: cfg.Version, Streams: a.Streams, Traffic: a.Counter,
		Procs: a.Procs, PTYs: a.PTYs, Watches: a.Watches, Kernels: a.Kernels, Files: a.Files, Cuts: a.Cuts,
		Origins: cfg.Origins,
	})
	a.Server.Mount(s.Surface())
	a.SetClients(s)
	return s
}
