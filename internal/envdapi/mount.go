package envdapi

import "github.com/rayito/rayito-agent/internal/capabilities"

// Mount builds envd's API over c's managers and mounts it on c's server,
// with the e2b SDK's control-plane calls where c asks.
func Mount(c capabilities.Set) *Server {
	log := c.Logger
	s := New(Config{
		Logger: log.Named("envd"), Auth: c.Auth, Streams: c.Streams, Procs: c.Procs, PTYs: c.PTYs,
		Watches: c.Watches, Users: c.Defaults, Files: c.Files, Cuts: c.Cuts, Open: c.EnvdOpen,
	})
	c.Server.Mount(s.Surface())
	if c.EnvdOpen {
		log.Warn("the envd API is open: anyone who reaches the port can run commands without a token")
	}
	if c.E2BAPI {
		c.Server.Mount(NewControlPlane(c.Auth, "local", func(env map[string]string) { c.Defaults.Set("", "", env) }).Surface())
		log.Info("answering the e2b SDK's control-plane calls (--e2b-api): E2B_API_URL may point at this agent")
	}
	return s
}
