package agent

import (
	"context"
	"sync/atomic"

	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
)

// The adapters between managers that do not know each other.

// clientsHolder is the pause's way to the clients (resume.Clients), set
// once the native surface has mounted; none before.
type clientsHolder struct {
	c atomic.Pointer[resume.Clients]
}

func (h *clientsHolder) set(c resume.Clients) { h.c.Store(&c) }

func (h *clientsHolder) Suspending(ctx context.Context, gen uint64) int {
	if c := h.c.Load(); c != nil {
		return (*c).Suspending(ctx, gen)
	}
	return 0
}

func (h *clientsHolder) Resumed(gen uint64, aborted bool) {
	if c := h.c.Load(); c != nil {
		(*c).Resumed(gen, aborted)
	}
}

// kernelHealth adapts the Jupyter manager to what the resume sequence and
// /health need.
type kernelHealth struct{ m *jupyter.Manager }

func (k kernelHealth) Check(ctx context.Context) []resume.KernelHealth {
	k.m.Check(ctx)
	return k.List()
}

func (k kernelHealth) Reseed(ctx context.Context) ([]string, []resume.KernelNotReseeded) {
	ok, not := k.m.Reseed(ctx)
	out := make([]resume.KernelNotReseeded, len(not))
	for i, n := range not {
		out[i] = resume.KernelNotReseeded{Kernel: n.Kernel, Reason: n.Reason}
	}
	return ok, out
}

func (k kernelHealth) List() []resume.KernelHealth {
	var out []resume.KernelHealth
	for _, info := range k.m.List() {
		state := "alive"
		switch info.State {
		case jupyter.StateDead:
			state = "dead"
		case jupyter.StateLost:
			state = "lost"
		case jupyter.StateSlow:
			state = "slow"
		}
		out = append(out, resume.KernelHealth{Kernel: info.Kernel, State: state})
	}
	return out
}

// metrics are the agent's own lines of /metrics, beside the host API's.
func (a *Agent) metrics(reaper *proc.Reaper) func(w *hostapi.MetricsWriter) {
	return func(w *hostapi.MetricsWriter) {
		w.Metric("rayito_orphans_reaped_total", "counter", "Orphaned descendants reaped.", "", float64(reaper.Orphans()))
		b := a.Streams.Budget().Stats()
		w.Metric("rayito_retention_budget_bytes", "gauge", "Memory the buffers of all streams may hold together.", "", float64(b.Limit))
		w.Metric("rayito_retention_used_bytes", "gauge", "Retention budget in use: held by streams, or set aside by running ones.", "", float64(b.Used))
		w.Metric("rayito_retention_ended_bytes", "gauge", "Memory held by ended streams.", "", float64(b.Ended))
		w.Metric("rayito_retention_input_bytes", "gauge", "Input queued for programs that have not read it (part of used).", "", float64(b.Input))
		w.Metric("rayito_streams_expired_total", "counter", "Ended streams that expired (by count, bytes, time or memory pressure).", "", float64(a.Streams.Expired()))
		on := 0.0
		if a.cgroups.On() {
			on = 1
		}
		w.Metric("rayito_isolation", "gauge", "1 if user work runs in its own limited cgroup.", "", on)
		if a.cgroups.On() {
			c := a.cgroups.Stats()
			w.Metric("rayito_user_memory_bytes", "gauge", "Memory the user cgroup uses.", "", float64(c.MemoryCurrent))
			w.Metric("rayito_user_memory_peak_bytes", "gauge", "The most memory the user cgroup used.", "", float64(c.MemoryPeak))
			w.Metric("rayito_user_memory_max_bytes", "gauge", "The user cgroup's memory.max.", "", float64(c.MemoryMax))
			w.Metric("rayito_user_tasks", "gauge", "Tasks in the user cgroup.", "", float64(c.Tasks))
			w.Metric("rayito_user_oom_kills_total", "counter", "User processes the OOM killer ended.", "", float64(c.OOMKills))
			w.Metric("rayito_user_runaway_kills_total", "counter", "Commands the process guard killed for holding too many processes.", "", float64(c.RunawayKills))
			w.Metric("rayito_user_fork_refusals_total", "counter", "Forks of user work refused at its pids.max.", "", float64(c.ForkRefusals))
			w.Metric("rayito_user_spare_starts_total", "counter", "Starts that took the spare: user work at its pids.max or stalled at its memory limit.", "", float64(c.SpareStarts))
			w.Metric("rayito_user_cpu_pressure_avg10", "gauge", "Share of the last 10 s a user task waited for a CPU, percent.", "", c.CPUPressure)
		}
	}
}
