package resume

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"

	"go.uber.org/zap"
)

// Clone safety: platforms resume one template snapshot as many sandboxes,
// and every copy starts from the same memory. Before a resume's new
// generation is published the agent makes the copies diverge: the kernel
// CRNG takes a new key (crng.go), then every Python kernel reseeds its
// PRNGs from it (KernelReseeder). A report that names another sandbox
// than the last gives the agent a new identity (OnNewSandbox).

// KernelReseeder reseeds the kernels' PRNGs; the Jupyter manager
// implements it.
type KernelReseeder interface {
	// Reseed has every kernel reseed and returns, within ctx, the ones
	// that did and the ones that did not, with why.
	Reseed(ctx context.Context) (reseeded []string, not []KernelNotReseeded)
}

// Rekeyer re-keys the kernel CRNG; *CRNG implements it.
type Rekeyer interface {
	Rekey(host []byte) (sources []string, err error)
	Unable() error
}

// MaxSandboxID bounds a sandbox id's length in bytes.
const MaxSandboxID = 128

// DecodeEntropy reads the host's entropy field: base64 (standard or URL
// alphabet, padded or not) of MinHostEntropy to MaxHostEntropy bytes.
// Errors never quote the value.
func DecodeEntropy(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) < MinHostEntropy || len(b) > MaxHostEntropy {
				clear(b)
				return nil, fmt.Errorf("entropy must be %d to %d bytes, got %d", MinHostEntropy, MaxHostEntropy, len(b))
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("entropy must be base64 (of %d to %d bytes)", MinHostEntropy, MaxHostEntropy)
}

// CheckSandboxID validates a sandbox id from the host: at most
// MaxSandboxID bytes of ASCII letters, digits, '-', '_', '.' and ':'. It
// ends up in every hook's environment and in state.json, so a control
// character or a NUL would break each later hook's start.
func CheckSandboxID(id string) error {
	if len(id) > MaxSandboxID {
		return fmt.Errorf("sandbox_id longer than %d bytes", MaxSandboxID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !sandboxIDByte(c) {
			return fmt.Errorf("sandbox_id may hold ASCII letters, digits, '-', '_', '.' and ':', got %q at byte %d", c, i)
		}
	}
	return nil
}

func sandboxIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':'
}

// Init applies what a host's /v1/init says about clone safety: entropy is
// mixed in and the CRNG re-keyed (when reseeding is on), and a sandbox id
// other than the last renews the agent's identity. It reports whether
// the CRNG was re-keyed and whether the sandbox is new.
func (m *Manager) Init(entropy []byte, sandboxID string) (reseeded, newSandbox bool) {
	m.seq.Lock()
	defer m.seq.Unlock()
	if len(entropy) > 0 && m.o.Reseed {
		_, err := m.crng.Rekey(entropy)
		reseeded = err == nil
	}
	return reseeded, m.adopt(sandboxID)
}

// adopt records sandboxID and, when it names another sandbox than the
// last one the agent had, runs OnNewSandbox. The first id an agent is
// given is news too if the state directory knew another. seq is held.
func (m *Manager) adopt(id string) bool {
	if id == "" {
		return false
	}
	m.saveMu.Lock()
	prev := m.sandbox
	changed := prev != id
	m.sandbox = id
	var err error
	if changed {
		err = m.saveLocked(m.liveKernels())
	}
	m.saveMu.Unlock()
	if !changed {
		return false
	}
	if err != nil {
		m.log.Warn("saving the sandbox id", zap.Error(err))
	}
	// An agent that had no id yet (a template booted without one) is
	// made into a sandbox by the first one it is given: whatever ran
	// before belongs to the template.
	m.log.Info("a new sandbox: the agent takes a new identity", zap.String("sandbox_id", id), zap.String("previous", prev))
	if m.o.OnNewSandbox != nil {
		m.o.OnNewSandbox(id)
	}
	return true
}

// mergeSources adds the names in more that a is missing, keeping a's order.
func mergeSources(a, more []string) []string {
	out := append([]string(nil), a...)
	for _, s := range more {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
