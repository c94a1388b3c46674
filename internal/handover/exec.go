package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exec writes s to a memfd and execs binary with args and env in place
// of this process, carrying s's descriptors. It returns only on failure,
// having made the descriptors close-on-exec again: the caller goes on as
// it was (and closes what it gave, Close).
//
// Nothing may fork between Exec's start and the exec: a child would
// inherit the carried descriptors. The caller has stopped starting
// processes first.
func (s *State) Exec(binary string, args, env []string) error {
	b, err := json.Marshal(s.env)
	if err != nil {
		return fmt.Errorf("handover state: %w", err)
	}
	// No MFD_CLOEXEC: the new binary reads it.
	mfd, err := unix.MemfdCreate("rayito-handover", unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd for the handover state: %w", err)
	}
	defer unix.Close(mfd)
	if err := writeAll(mfd, b); err != nil {
		return fmt.Errorf("writing the handover state: %w", err)
	}
	// Sealed: nothing the new agent starts can change what it reads.
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		return fmt.Errorf("sealing the handover state: %w", err)
	}
	// The binary handing over, for the new one to hand back to.
	self, err := unix.Open("/proc/self/exe", unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("keeping this binary to hand back to: %w", err)
	}
	defer unix.Close(self)
	for _, fd := range s.env.FDs {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			s.closeOnExec()
			return fmt.Errorf("carrying descriptor %d: %w", fd, err)
		}
	}
	env = append(withoutEnv(env, EnvFD, EnvPrevious, EnvFailed), EnvFD+"="+strconv.Itoa(mfd), EnvPrevious+"="+strconv.Itoa(self))
	err = syscall.Exec(binary, args, env)
	s.closeOnExec()
	return fmt.Errorf("exec %s: %w", binary, err)
}

// maxFailed bounds the reason a hand-back passes on.
const maxFailed = 1024

// HandBack execs the binary that handed over, with the same state and
// descriptors and why in EnvFailed: it serves on as before the upgrade.
// Call it only before this agent serves or starts a process (it must not
// have closed or inherited away anything carried). It returns only if the
// exec failed, or there is nothing to hand back to.
func (s *State) HandBack(args, env []string, why string) error {
	if s.committed || s.previousFD < 0 || s.stateFD < 0 {
		return errors.New("nothing to hand back to")
	}
	why = strings.Join(strings.Fields(why), " ")
	if len(why) > maxFailed {
		why = why[:maxFailed]
	}
	for _, fd := range append(slices.Collect(maps.Values(s.env.FDs)), s.stateFD) {
		unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0)
	}
	env = append(withoutEnv(env, EnvFD, EnvPrevious, EnvFailed), EnvFD+"="+strconv.Itoa(s.stateFD), EnvFailed+"="+why)
	err := syscall.Exec(fmt.Sprintf("/proc/self/fd/%d", s.previousFD), args, env)
	return fmt.Errorf("handing back: %w", err)
}

func (s *State) closeOnExec() {
	for _, fd := range s.env.FDs {
		unix.CloseOnExec(fd)
	}
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func withoutEnv(env []string, names ...string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return out
}
