package files

import (
	"slices"
	"strconv"
)

// Acting with the agent's rights on a user's behalf, as E2B's envd (which
// runs as root) does on its surface: the operation runs as the agent,
// and what it creates, missing directories and a new file, is given to
// the user (WriteOptions.Owner, MakeDirFor, MoveOptions.Owner), each
// relative to its directory's descriptor (dirfd.go). The native surface
// never does this: it acts as the user. Who may be served so is the
// surface's choice: envd's gives it only to users who could become root
// anyway (Privileged).

// Agent is the name (its uid) that resolves to the agent's own identity,
// for operations with its rights.
func (m *Manager) Agent() string { return strconv.FormatUint(uint64(m.self.uid), 10) }

// Privileged says whether u has root's rights anyway: root, or a member
// of an admin group (Options.AdminGroups: by default in the agent sudo,
// Debian's and Ubuntu's, and wheel, Fedora's, Alpine's and Arch's), who
// can become root. Only such users may be served with the agent's
// rights: for anyone else that would let a program of theirs, or of
// another user, aim the agent's rights at what they could not reach
// (a symlink from their home into root's directories).
func (m *Manager) Privileged(u User) bool {
	if u.UID == 0 {
		return true
	}
	for _, g := range m.adminGroups {
		if gid, err := m.users.GID(g); err == nil && (u.GID == gid || slices.Contains(u.Groups, gid)) {
			return true
		}
	}
	return false
}

// noMagicFor says whether an operation as u, creating for owner, may not
// go through a /proc magic link (magic.go): it works for someone other
// than the agent.
func (m *Manager) noMagicFor(u User, owner *User) bool {
	return owner != nil || u.UID != m.self.uid || u.GID != m.self.gid
}

// gift is who gets what an operation creates: owner, unless it is nil
// or the agent itself (who created it).
func gift(owner *User) *User {
	if owner == nil || owner.IsAgent() {
		return nil
	}
	return owner
}
