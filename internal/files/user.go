package files

import (
	"errors"

	"github.com/rayito/rayito-agent/internal/users"
)

// User is the account an operation runs as.
type User = users.Account

// owner resolves an owner given by name or number.
func (m *Manager) owner(name string) (uint32, error) {
	uid, err := m.users.UID(name)
	if errors.Is(err, users.ErrUnknown) {
		return 0, newErr("user", name, ErrUnknownUser, nil)
	}
	if err == nil && uid == unchangedID {
		return 0, newErr("user", name, ErrInvalid, errUnchangedID)
	}
	return uid, err
}

// group resolves a group given by name or number.
func (m *Manager) group(name string) (uint32, error) {
	gid, err := m.users.GID(name)
	if errors.Is(err, users.ErrUnknown) {
		return 0, newErr("group", name, ErrUnknownUser, nil)
	}
	if err == nil && gid == unchangedID {
		return 0, newErr("group", name, ErrInvalid, errUnchangedID)
	}
	return gid, err
}

// unchangedID is the id chown(2) reads as "leave it unchanged": a caller
// naming it would get OK and no change.
const unchangedID = ^uint32(0)
