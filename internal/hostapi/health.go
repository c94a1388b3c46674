package hostapi

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/metrics"
	"sort"
	"strings"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/surface"
)

// Health is the body of GET /health.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	// Instance changes when the agent restarts, or when a snapshot is
	// resumed as a new sandbox (sandbox_id), not on a plain resume.
	Instance string `json:"instance"`
	resume.State
	UptimeMs  int64           `json:"uptime_ms"`
	Isolation *proc.Isolation `json:"isolation,omitempty"`
	// Paused: a host's pause is in place (State.Pause says which).
	Paused bool `json:"paused,omitempty"`
}

func (s *API) health() Health {
	h := Health{Status: "ok", Version: s.cfg.Version, Instance: s.instance(), UptimeMs: time.Since(s.started).Milliseconds()}
	if s.cfg.Resume != nil {
		h.State = s.cfg.Resume.State()
	}
	if h.Kernels == nil {
		h.Kernels = []resume.KernelHealth{}
	}
	h.Paused = h.Pause != nil
	if s.cfg.Isolation != nil {
		iso := s.cfg.Isolation()
		h.Isolation = &iso
	}
	return h
}

// instance is this run's id, which stream ids carry too.
func (s *API) instance() string {
	if s.cfg.Streams == nil {
		return ""
	}
	return s.cfg.Streams.Instance()
}

// PublicHealth is /health without the token: what a host's probe needs
// and nothing more. Any page can read it (CORS: any origin by default),
// so the sandbox's id, its kernels and what its last resume did are for
// token holders only.
type PublicHealth struct {
	Status           string `json:"status"`
	Version          string `json:"version"`
	Instance         string `json:"instance"`
	ResumeGeneration uint64 `json:"resume_generation"`
	KernelStateLost  bool   `json:"kernel_state_lost"`
	// Paused: the host's /v1/pause is in place (user work is frozen).
	Paused bool `json:"paused,omitempty"`
}

func (s *API) handleHealth(w http.ResponseWriter, r *http.Request) {
	h := s.health()
	if s.cfg.Auth.Check(r, surface.AgentTokens) == nil {
		surface.WriteJSON(w, http.StatusOK, h)
		return
	}
	surface.WriteJSON(w, http.StatusOK, PublicHealth{Status: h.Status, Version: h.Version, Instance: h.Instance,
		ResumeGeneration: h.Generation, KernelStateLost: h.KernelStateLost, Paused: h.Paused})
}

func (s *API) handleTraffic(w http.ResponseWriter, r *http.Request) {
	surface.WriteJSON(w, http.StatusOK, s.cfg.Traffic.Snapshot())
}

// MetricsWriter writes Prometheus text exposition lines.
type MetricsWriter struct {
	b     strings.Builder
	typed map[string]bool
}

// Metric writes one sample with its HELP and TYPE lines. labels is a
// preformatted label set like `kind="pty"` or "".
func (m *MetricsWriter) Metric(name, typ, help, labels string, value float64) {
	if !m.typed[name] {
		if m.typed == nil {
			m.typed = map[string]bool{}
		}
		m.typed[name] = true
		fmt.Fprintf(&m.b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	if labels != "" {
		labels = "{" + labels + "}"
	}
	fmt.Fprintf(&m.b, "%s%s %g\n", name, labels, value)
}

func (s *API) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var m MetricsWriter
	t := s.cfg.Traffic.Snapshot()
	m.Metric("rayito_bytes_in_total", "counter", "Websocket payload bytes received.", "", float64(t.BytesIn))
	m.Metric("rayito_bytes_out_total", "counter", "Websocket payload bytes sent.", "", float64(t.BytesOut))
	m.Metric("rayito_idle_seconds", "gauge", "Seconds since the last counted byte.", "", float64(t.IdleMs)/1000)
	m.Metric("rayito_connections", "gauge", "Open websocket connections.", "", float64(t.Connections))
	pastMax := 0
	for _, h := range t.Holds {
		if !h.Counting {
			pastMax++
		}
	}
	m.Metric("rayito_holds", "gauge", "Holds keeping the sandbox awake (keep_awake streams and leases).", "", float64(len(t.Holds)-pastMax))
	m.Metric("rayito_holds_past_max", "gauge", "Holds past --max-hold-seconds, listed but no longer counting.", "", float64(pastMax))
	var conns surface.ConnStats
	if s.cfg.Conns != nil {
		conns = s.cfg.Conns()
	}
	m.Metric("rayito_http_connections_refused_total", "counter", "Connections over the limits, served the host routes only or closed.", "", float64(conns.Refused))
	m.Metric("rayito_http_connections_evicted_total", "counter", "Idle connections closed to make room for new ones.", "", float64(conns.Evicted))
	h := s.health()
	m.Metric("rayito_resume_generation", "gauge", "Resumes since the first boot.", "", float64(h.Generation))
	lost := 0.0
	if h.KernelStateLost {
		lost = 1
	}
	m.Metric("rayito_kernel_state_lost", "gauge", "1 if a kernel was lost in a resume.", "", lost)
	if s.cfg.Streams != nil {
		counts := map[string]int{}
		var dropped uint64
		var retained int
		for _, st := range s.cfg.Streams.List("") {
			state := "running"
			if st.Ended() != nil {
				state = "ended"
			}
			counts[fmt.Sprintf("kind=%q,state=%q", st.Kind, state)]++
			for _, l := range st.Logs() {
				dropped += l.Stats().Lost
				retained += l.Memory()
			}
		}
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			m.Metric("rayito_streams", "gauge", "Streams known to the agent.", k, float64(counts[k]))
		}
		m.Metric("rayito_stream_lost_total", "counter", "Bytes or events discarded before any client acknowledged them.", "", float64(dropped))
		m.Metric("rayito_stream_retained_bytes", "gauge", "Memory the streams hold for clients: output buffers and encoded events.", "", float64(retained))
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics(&m)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.Metric("go_goroutines", "gauge", "Goroutines.", "", float64(runtime.NumGoroutine()))
	m.Metric("go_memstats_heap_inuse_bytes", "gauge", "Heap bytes in use.", "", float64(ms.HeapInuse))
	m.Metric("go_memstats_stack_inuse_bytes", "gauge", "Goroutine stack bytes in use.", "", float64(ms.StackInuse))
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() == metrics.KindUint64 {
		m.Metric("go_gc_heap_live_bytes", "gauge", "Heap bytes reachable at the end of the last garbage collection.", "", float64(live[0].Value.Uint64()))
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(m.b.String()))
}
