package envdapi

import (
	"path/filepath"

	"github.com/rayito/rayito-agent/internal/files"
)

// behalf is how the envd surface does a file operation for the user a
// request names: with the agent's own rights, as envd (which runs as
// root) does, so that nothing envd allows is refused here (the SDK
// names "user" on every call, and writes into root's directories). The
// user decides where a relative path starts (their home) and who owns
// what the operation creates: missing directories and new files are
// given to them, as envd's EnsureDirs and upload do. The native surface
// acts as the user instead (protocol.md, Files).
type behalf struct {
	agent string      // the agent's own name for the file manager
	owner *files.User // who gets what is created
}

// onBehalf resolves the request's user ("" is the default user).
func (s *Server) onBehalf(user string) (behalf, error) {
	u, err := s.cfg.Files.User(user)
	if err != nil {
		return behalf{}, err
	}
	return behalf{agent: s.cfg.Files.Agent(), owner: &u}, nil
}

// path is p from the user's home when relative.
func (b behalf) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	home := b.owner.Home
	if home == "" {
		home = "/"
	}
	return filepath.Join(home, p)
}
