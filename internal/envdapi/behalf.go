package envdapi

import (
	"path/filepath"
	"strconv"

	"github.com/rayito/rayito-agent/internal/files"
)

// behalf is how the envd surface does a file operation for the user a
// request names. For a user with root's rights anyway (root, or a member
// of the admin group: files.Manager.Privileged), with the agent's own
// rights, as envd (which runs as root, in images where the user has sudo)
// does, so that nothing envd allows is refused here: the SDK names "user"
// on every call, and writes into root's directories; what the operation
// creates (missing directories, new files) is given to the user, as
// envd's EnsureDirs and upload do. For anyone else, with the user's own
// rights, as the native surface always does: the agent's rights would let
// a program of theirs aim them at root's files through a symlink. Either
// way the user decides where a relative path starts (their home).
type behalf struct {
	as    string      // who the file manager acts as: the agent, or the user
	user  *files.User // the request's user
	owner *files.User // who gets what is created when acting as the agent; nil else
}

// onBehalf resolves the request's user ("" is the default user).
func (s *Server) onBehalf(user string) (behalf, error) {
	u, err := s.cfg.Files.User(user)
	if err != nil {
		return behalf{}, err
	}
	if s.cfg.Files.Privileged(u) {
		return behalf{as: s.cfg.Files.Agent(), user: &u, owner: &u}, nil
	}
	return behalf{as: strconv.FormatUint(uint64(u.UID), 10), user: &u}, nil
}

// path is p from the user's home when relative.
func (b behalf) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	home := b.user.Home
	if home == "" {
		home = "/"
	}
	return filepath.Join(home, p)
}
