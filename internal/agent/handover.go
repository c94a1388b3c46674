package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rayito/rayito-agent/internal/handover"
	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/traffic"
)

// The agent's part in an upgrade (resume.Handover): the surfaces stop by
// the cut's rule, and what the managers hold crosses the exec in
// sections of the handover state. What this version does not carry yet
// (streams, and the processes, terminals, watches and cells behind them;
// kernels; holds on the idle clock) makes an upgrade refuse before
// anything stops, rather than lose it.

// Sections the agent's own participants write.
const (
	sectionIdentity = "identity" // the stream registry's: instance id, id prefixes
	sectionAuth     = "auth"
	sectionTraffic  = "traffic"
	sectionUptime   = "uptime"
)

// uptimeCarried is the agent's uptime when it was carried; the handover's
// own time is added on the other side.
type uptimeCarried struct {
	UptimeNs int64 `json:"uptime_ns"`
	AtUnixNs int64 `json:"at_unix_ns"`
}

type authCarried struct {
	Token string `json:"token,omitempty"`
}

// handoverParts implements resume.Handover over the agent.
type handoverParts struct{ a *Agent }

var _ resume.Handover = handoverParts{}

func (h handoverParts) Carriable() error {
	a := h.a
	var held []string
	if n := len(a.Streams.List("")); n > 0 {
		held = append(held, fmt.Sprintf("%d streams (commands, terminals, watches, cells, ended ones still attachable)", n))
	}
	if n := len(a.Kernels.List()); n > 0 {
		held = append(held, fmt.Sprintf("%d kernels", n))
	}
	if n := len(a.Counter.Holds().List()); n > 0 {
		held = append(held, fmt.Sprintf("%d holds on the idle clock", n))
	}
	if len(held) > 0 {
		return fmt.Errorf("this version hands over none of: %s; try again once they are gone", strings.Join(held, ", "))
	}
	return nil
}

func (h handoverParts) Suspend(ctx context.Context) error { return h.a.Server.Suspend(ctx) }

func (h handoverParts) Unsuspend() { h.a.Server.Unsuspend() }

func (h handoverParts) Collect(s *handover.State) error {
	a := h.a
	var auth authCarried
	a.Auth.WithToken(func(t string) bool { auth.Token = t; return true })
	up := uptimeCarried{UptimeNs: int64(a.Host.Uptime()), AtUnixNs: time.Now().UnixNano()}
	err := errors.Join(s.Put(sectionIdentity, a.Streams.Identity()), s.Put(sectionAuth, auth), s.Put(sectionTraffic, a.Counter.Carry()),
		s.Put(sectionUptime, up))
	if err == nil && a.Config.CarryListeners != nil {
		err = a.Config.CarryListeners(s)
	}
	return err
}

// adopt takes over what the agent that handed over carried, before
// anything serves; the lifecycle's part waits in a.adopted for
// FinishUpgrade.
func (a *Agent) adopt(s *handover.State) error {
	var id stream.Identity
	if ok, err := s.Get(sectionIdentity, &id); err != nil || !ok {
		return fmt.Errorf("handover: the stream identity: %v", err)
	}
	if err := a.Streams.AdoptIdentity(id); err != nil {
		return err
	}
	var auth authCarried
	if _, err := s.Get(sectionAuth, &auth); err != nil {
		return err
	}
	if auth.Token != "" {
		a.Auth.Set(auth.Token)
	}
	var k traffic.Carried
	if ok, err := s.Get(sectionTraffic, &k); err != nil {
		return err
	} else if ok {
		a.Counter.Adopt(k)
	}
	var up uptimeCarried
	if ok, err := s.Get(sectionUptime, &up); err != nil {
		return err
	} else if ok {
		a.Host.SetUptime(time.Duration(up.UptimeNs) + max(time.Since(time.Unix(0, up.AtUnixNs)), 0))
	}
	ad, err := a.Resumer.AdoptUpgrade(s)
	if err != nil {
		return err
	}
	a.adopted = ad
	return nil
}

// FinishUpgrade ends the upgrade this agent took over, once it serves:
// user work thaws and the host's call is answered on its own connection.
// It does nothing if the agent was not started by an upgrade.
func (a *Agent) FinishUpgrade() {
	if a.adopted == nil {
		return
	}
	ans, caller := a.Resumer.FinishUpgrade(a.adopted)
	a.adopted = nil
	if caller != nil {
		hostapi.AnswerUpgradeCaller(caller, ans)
		caller.Close()
	}
}
