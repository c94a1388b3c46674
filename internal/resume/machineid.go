package resume

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
)

// machineIDFiles are where a Linux system keeps its machine id: systemd's,
// and D-Bus's copy where it is a file of its own.
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// RenewMachineID gives a clone a machine id of its own (every copy of a
// snapshot has its template's): 32 hex digits from the CRNG, which the
// resume has re-keyed by then, written where the files exist. A symlink
// (D-Bus's copy often points at /etc's) is left alone.
func RenewMachineID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	var errs []error
	for _, f := range machineIDFiles {
		st, err := os.Lstat(f)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && !st.Mode().IsRegular()) {
			continue
		}
		if err == nil {
			err = os.WriteFile(f, []byte(id+"\n"), st.Mode().Perm())
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return id, errors.Join(errs...)
}
