package ptymux_test

import (
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// At the end of its lifetime a terminal is hung up: a shell exits on the
// SIGHUP, and its output up to then is all in the stream.
func TestLifetimeHangsUp(t *testing.T) {
	t.Parallel()
	o := shell()
	o.Timeout = 500 * time.Millisecond
	sh := start(t, newManager(t), o)
	sh.typ("echo l\"\"ive\r")
	sh.waitFor("live\r\n")
	if e := sh.waitEnd(); e.Reason != stream.ReasonExit || e.Signal != "SIGHUP" {
		t.Fatalf("end %+v, want SIGHUP", e)
	}
}

// A program that ignores the hangup is killed, with its group, once the
// hangup grace has passed.
func TestLifetimeKillsWhatIgnoresHangup(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	m.SetTimings(ptymux.DrainTimeout, 200*time.Millisecond, ptymux.KillGrace)
	stubborn := start(t, m, ptymux.Options{
		Argv:    []string{"bash", "--norc", "--noprofile", "-c", `trap '' HUP; echo ready; sleep 1000`},
		Timeout: 300 * time.Millisecond,
	})
	stubborn.waitFor("ready\r\n")
	sleep := waitChild(t, stubborn.s.Pid, "sleep")
	if e := stubborn.waitEnd(); e.Reason != stream.ReasonExit || e.Signal != "SIGKILL" {
		t.Fatalf("end %+v, want SIGKILL", e)
	}
	deadline := time.Now().Add(waitLong)
	for alive(sleep) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(sleep) {
		t.Fatalf("sleep %d outlived its terminal's lifetime", sleep)
	}
}

func TestNegativeLifetime(t *testing.T) {
	t.Parallel()
	o := shell()
	o.Timeout = -time.Second
	_, err := newManager(t).Start(o)
	wantWireError(t, err, wire.CodeBadRequest, "timeout")
}
