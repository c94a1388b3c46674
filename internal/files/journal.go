package files

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// Temporary files are named after their target so that a person who finds
// one knows what it is: ".report.csv.rayito-1a2b3c4d.tmp".
const (
	tempMark   = ".rayito-"
	tempSuffix = ".tmp"
	// maxTempBase keeps a temporary name within NAME_MAX (255) whatever
	// the target's name.
	maxTempBase = 200
)

// tempName returns a fresh temporary path next to target.
func tempName(target string) string {
	base := filepath.Base(target)
	if len(base) > maxTempBase {
		base = base[:maxTempBase]
	}
	return filepath.Join(filepath.Dir(target), "."+base+tempMark+randomHex(4)+tempSuffix)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// IsTemp reports whether path names one of the temporary files the
// Writer (and a move across filesystems) makes next to its target: a
// watch sees their events around every write.
func IsTemp(path string) bool { return isTempName(filepath.Base(path)) }

func isTempName(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMark) && strings.HasSuffix(name, tempSuffix)
}

// journal records each temporary file while it exists, in the agent's
// state directory, so that the ones a crash (of the agent or of the VM)
// left behind are found and removed at the next start without walking
// every filesystem. Entries are not synced: after a power cut an entry
// may be lost with its temporary file, or the file may outlive its entry,
// a leftover that at worst takes space.
type journal struct {
	dir string
	log *zap.Logger
}

// journalEntry is one temporary file and who created it: it is removed as
// that user, so a user who replaced a directory on its path with a
// symlink cannot make the agent remove anything that user could not.
type journalEntry struct {
	Path   string   `json:"path"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

func openJournal(dir string, log *zap.Logger) (*journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &journal{dir: dir, log: log}, nil
}

// add records tmp and returns the entry's name, "" if it could not be
// written (the write goes on; only a crash would leave its file behind).
func (j *journal) add(tmp string, u User) string {
	if j == nil {
		return ""
	}
	b, _ := json.Marshal(journalEntry{Path: tmp, UID: u.UID, GID: u.GID, Groups: u.Groups})
	name := randomHex(8)
	if err := os.WriteFile(filepath.Join(j.dir, name), b, 0o600); err != nil {
		j.log.Warn("temporary file not journaled", zap.String("path", tmp), zap.Error(err))
		return ""
	}
	return name
}

// done forgets an entry whose file was renamed into place or removed.
func (j *journal) done(name string) {
	if j != nil && name != "" {
		os.Remove(filepath.Join(j.dir, name))
	}
}

// cleanup removes every journaled temporary file, as its user.
func (j *journal) cleanup(m *Manager) {
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		j.log.Warn("reading the journal of temporary files", zap.Error(err))
		return
	}
	for _, e := range entries {
		p := filepath.Join(j.dir, e.Name())
		var ent journalEntry
		if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &ent) == nil && isTempName(filepath.Base(ent.Path)) {
			u := User{Name: "uid " + strconv.FormatUint(uint64(ent.UID), 10), UID: ent.UID, GID: ent.GID, Groups: ent.Groups}
			err := m.as(u, func() error { return os.RemoveAll(ent.Path) })
			j.log.Info("removed a temporary file left by an interrupted write", zap.String("path", ent.Path), zap.Error(err))
		}
		os.Remove(p)
	}
}
