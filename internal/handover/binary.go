package handover

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// ErrBinary: the new binary is not one this machine can hand over to.
var ErrBinary = errors.New("not an agent binary for this machine")

// CheckCommand is the subcommand by which a binary says what it is
// before anything stops: it prints a Probe as JSON and exits.
const CheckCommand = "handover-check"

// Probe is what a new binary says of itself.
type Probe struct {
	Version string `json:"version"`
	// Reads are the handover formats it reads.
	Reads []int `json:"reads"`
}

// Self is this binary's Probe.
func Self(version string) Probe { return Probe{Version: version, Reads: Reads} }

// elfMachine is this machine's ELF machine.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]

// CheckFile checks that f is an executable ELF for this machine, owned
// by root and writable by nobody else (the agent runs it as itself), and
// that its SHA-256 is sum (hex; "" skips that check).
func CheckFile(f *os.File, sum string) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: not a regular file", ErrBinary)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && os.Geteuid() == 0 {
		return fmt.Errorf("%w: owned by uid %d, not root", ErrBinary, sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: writable by others (mode %v)", ErrBinary, st.Mode().Perm())
	}
	if st.Mode().Perm()&0o100 == 0 {
		return fmt.Errorf("%w: not executable by its owner (mode %v)", ErrBinary, st.Mode().Perm())
	}
	e, err := elf.NewFile(f)
	if err != nil {
		return fmt.Errorf("%w: not an ELF file (%v)", ErrBinary, err)
	}
	if e.Class != elf.ELFCLASS64 || e.Machine != elfMachine || (e.Type != elf.ET_EXEC && e.Type != elf.ET_DYN) {
		return fmt.Errorf("%w: an ELF %v %v %v, this machine runs %v executables", ErrBinary, e.Class, e.Machine, e.Type, elfMachine)
	}
	if sum == "" {
		return nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size())); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, sum) {
		return fmt.Errorf("%w: its SHA-256 is %s, not %s", ErrBinary, got, sum)
	}
	return nil
}

// maxProbe bounds what a binary may print when checked.
const maxProbe = 64 << 10

// ProbeBinary runs path's CheckCommand within ctx and reads what it says.
func ProbeBinary(ctx context.Context, path string) (Probe, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, path, CheckCommand)
	cmd.Stdout, cmd.Stderr = &limited{&out, maxProbe}, &limited{&errb, maxProbe}
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var p Probe
	switch {
	case ctx.Err() != nil:
		return p, fmt.Errorf("%w: %s %s did not answer in time", ErrBinary, path, CheckCommand)
	case err != nil:
		return p, fmt.Errorf("%w: %s %s: %v: %s", ErrBinary, path, CheckCommand, err, strings.TrimSpace(errb.String()))
	}
	if err := json.Unmarshal(out.Bytes(), &p); err != nil || p.Version == "" {
		return p, fmt.Errorf("%w: %s %s printed %q, not a version and formats", ErrBinary, path, CheckCommand, strings.TrimSpace(out.String()))
	}
	return p, nil
}

// Choose is the format to write for a binary that reads theirs: the
// newest this agent writes and it reads.
func Choose(theirs []int) (int, error) {
	for f := Format; f >= Format-1 && f > 0; f-- {
		for _, t := range theirs {
			if t == f {
				return f, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: it reads handover formats %v, this agent writes %d (or %d)", ErrFormat, theirs, Format, Format-1)
}

type limited struct {
	w *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
