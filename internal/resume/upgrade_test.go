package resume

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/handover"
)

// The test binary stands for the new agent: asked for its handover-check
// it answers as a binary of version "next" would.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == handover.CheckCommand {
		json.NewEncoder(os.Stdout).Encode(handover.Self("next"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// journalHandover records what the upgrade asked of the agent; the
// error fields make a part fail, hold makes Suspend wait for its ctx.
type journalHandover struct {
	j          *journal
	cannot     error
	collectErr error
	hold       bool
	carried    *os.File // what Collect puts in the state
}

func (h *journalHandover) Carriable() error { return h.cannot }
func (h *journalHandover) Suspend(ctx context.Context) error {
	h.j.add("suspend")
	if h.hold {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}
func (h *journalHandover) Unsuspend() { h.j.add("unsuspend") }
func (h *journalHandover) Collect(s *handover.State) error {
	h.j.add("collect")
	if f, err := os.Open(os.DevNull); err == nil {
		h.carried = f
		s.PutFile("test", f)
	}
	return h.collectErr
}

func self(t *testing.T) *os.File {
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestUpgradeFailureUndoesWhatItDid: a step that fails (here the state's
// collection) leaves the agent as it was: the surfaces serve again, user
// work thaws, the lifecycle is free; the answer says which step failed,
// health keeps it as the last upgrade, and its upgrade_id gets it again.
func TestUpgradeFailureUndoesWhatItDid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the binary check wants a binary owned by root: run as root")
	}
	j := &journal{}
	h := &journalHandover{j: j, collectErr: errors.New("a participant cannot say its state")}
	m := journaled(j, false, Options{Version: "now", Handover: h})
	u, repeat, err := m.PrepareUpgrade(context.Background(), UpgradeRequest{ID: "u1", Binary: self(t)})
	if err != nil || repeat != nil {
		t.Fatalf("prepare: %v, %v", err, repeat)
	}
	a := u.Run(nil)
	if got, want := j.String(), "freeze,suspend,collect,unsuspend,thaw"; got != want {
		t.Fatalf("the upgrade did %s, want %s", got, want)
	}
	if got, want := stepsLine(a.Steps), "check=done freeze=done suspend=done collect=failed thaw=done"; got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	if a.State != "failed" || a.ToVersion != "next" || !strings.Contains(a.Error, "cannot say its state") {
		t.Fatalf("answer %+v", a)
	}
	if _, err := h.carried.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("a descriptor collected for the exec that did not happen is still open (%v)", err)
	}
	if st := m.State(); st.Upgrades != 0 || st.LastUpgrade == nil || st.LastUpgrade.State != "failed" {
		t.Fatalf("health after: %+v", st)
	}
	if _, repeat, _ := m.PrepareUpgrade(context.Background(), UpgradeRequest{ID: "u1", Binary: self(t)}); repeat == nil || repeat.AtUnixMs != a.AtUnixMs {
		t.Fatalf("a repeat of u1 got %+v, want the first answer", repeat)
	}
	// The lifecycle is free: a resume runs.
	if st := m.Resume(context.Background(), Report{Source: SourceHost}); st.Generation != 1 {
		t.Fatalf("a resume after the failed upgrade: generation %d", st.Generation)
	}
}

// TestUpgradeDeadline: a suspension that outlasts the deadline fails the
// upgrade before the state is collected, and undoes the rest.
func TestUpgradeDeadline(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the binary check wants a binary owned by root: run as root")
	}
	j := &journal{}
	m := journaled(j, false, Options{Version: "now", Handover: &journalHandover{j: j, hold: true}})
	u, _, err := m.PrepareUpgrade(context.Background(), UpgradeRequest{Binary: self(t), Deadline: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := u.Run(nil)
	if got, want := stepsLine(a.Steps), "check=done freeze=done suspend=failed thaw=done"; got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	if got, want := j.String(), "freeze,suspend,unsuspend,thaw"; got != want {
		t.Fatalf("the upgrade did %s, want %s", got, want)
	}
}

// TestUpgradeRefusals: what PrepareUpgrade refuses before anything
// stops, each with the error its callers branch on.
func TestUpgradeRefusals(t *testing.T) {
	j := &journal{}
	h := &journalHandover{j: j}
	m := journaled(j, false, Options{Version: "now", Handover: h})
	script, err := os.CreateTemp(t.TempDir(), "script")
	if err != nil {
		t.Fatal(err)
	}
	script.WriteString("#!/bin/sh\n")
	script.Chmod(0o755)
	for _, c := range []struct {
		name string
		m    *Manager
		req  UpgradeRequest
		want error
		says string
	}{
		{"no handover", journaled(j, false, Options{}), UpgradeRequest{Binary: self(t)}, ErrBadUpgrade, "without a handover"},
		{"no binary", m, UpgradeRequest{}, ErrBadUpgrade, "no binary"},
		{"a short deadline", m, UpgradeRequest{Binary: self(t), Deadline: time.Millisecond}, ErrBadUpgrade, "deadline_ms must be"},
		{"a script", m, UpgradeRequest{Binary: script}, ErrBadUpgrade, "not an ELF file"},
	} {
		_, _, err := c.m.PrepareUpgrade(context.Background(), c.req)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
	// Busy: a pause in place; a sequence running.
	if _, err := m.Pause(context.Background(), pauseReq()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.PrepareUpgrade(context.Background(), UpgradeRequest{Binary: self(t)}); !errors.Is(err, ErrUpgradeBusy) {
		t.Errorf("during a pause: %v", err)
	}
	m.Abort()
	m.seq.Lock()
	_, _, err = m.PrepareUpgrade(context.Background(), UpgradeRequest{Binary: self(t)})
	m.seq.Unlock()
	if !errors.Is(err, ErrUpgradeBusy) {
		t.Errorf("during a resume: %v", err)
	}
	if os.Geteuid() == 0 {
		h.cannot = errors.New("2 streams")
		if _, _, err := m.PrepareUpgrade(context.Background(), UpgradeRequest{Binary: self(t)}); !errors.Is(err, ErrCannotCarry) {
			t.Errorf("holding what cannot be carried: %v", err)
		}
	}
	// Nothing was frozen or suspended by any of them.
	if strings.Contains(j.String(), "suspend") {
		t.Errorf("a refused upgrade suspended the surfaces: %s", j)
	}
	// And the lifecycle is free.
	if !m.seq.TryLock() {
		t.Fatal("a refused upgrade kept the lifecycle")
	}
	m.seq.Unlock()
}
