package envdapi

import "github.com/rayito/rayito-agent/internal/agent"

// Mount builds envd's API over a's managers and mounts it on a's server,
// with the e2b SDK's control-plane calls where a's config asks.
func Mount(a *agent.Agent) *Server {
	cfg, log := a.Config, a.Config.Logger
	s := New(Config{
		Logger: log.Named("envd"), Auth: a.Auth, Streams: a.Streams, Procs: a.Procs, PTYs: a.PTYs,
		Watches: a.Watches, Users: a.Defaults, Files: a.Files, Cuts: a.Cuts, Open: cfg.EnvdOpen,
	})
	a.Server.Mount(s.Surface())
	if cfg.EnvdOpen {
		log.Warn("the envd API is open: anyone who reaches the port can run commands without a token")
	}
	if cfg.E2BAPI {
		a.Server.Mount(NewControlPlane(a.Auth, "local", func(env map[string]string) { a.Defaults.Set("", "", env) }).Surface())
		log.Info("answering the e2b SDK's control-plane calls (--e2b-api): E2B_API_URL may point at this agent")
	}
	return s
}
