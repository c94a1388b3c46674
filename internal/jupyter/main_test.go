package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// The tests share one reaper (only one may run per process), one registry
// and one manager, and most share one kernel, since each start costs about
// a second.
var env struct {
	reg    *stream.Registry
	mgr    *Manager
	reaper *proc.Reaper

	once   sync.Once
	shared *Kernel
	err    error
}

// waitFor is how long a test waits for anything a kernel does; generous
// because two cores run many kernels at once here.
const waitFor = 60 * time.Second

// answerBound bounds what a running kernel does at once (end a cell it
// was interrupted in, abort one that timed out, beyond its 5 s fallback):
// long for a loaded machine, short enough that a missing interrupt fails
// the test well before waitFor.
const answerBound = 15 * time.Second

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, func(reaper *proc.Reaper) func() {
		env.reaper = reaper
		env.reg = stream.NewRegistry(0)
		logger := zap.NewNop()
		if os.Getenv("JUPYTER_TEST_LOG") != "" {
			logger, _ = zap.NewDevelopment()
		}
		env.mgr = NewManager(Options{Registry: env.reg, Reaper: reaper, Logger: logger, Reseed: true})
		return func() {
			env.mgr.Close()
			env.reg.Close()
		}
	}))
}

func sharedKernel(t testing.TB) *Kernel {
	env.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		// Named: an unnamed kernel could become the default one, which
		// some tests kill.
		env.shared, env.err = env.mgr.Start(ctx, StartOptions{Name: DefaultKernel})
	})
	if env.err != nil {
		t.Fatalf("start shared kernel: %v", env.err)
	}
	return env.shared
}

// startKernel starts a kernel of the test's own and shuts it down after.
func startKernel(t testing.TB) *Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	k, err := env.mgr.Start(ctx, StartOptions{Name: DefaultKernel}) // never the default
	if err != nil {
		t.Fatalf("start kernel: %v", err)
	}
	t.Cleanup(func() { env.mgr.Shutdown(context.Background(), k.ID()) })
	return k
}

// event is any cell or jupyter event, decoded.
type event struct {
	Event          string                     `json:"event"`
	Stream         uint64                     `json:"stream"`
	Seq            uint64                     `json:"seq"`
	Type           string                     `json:"type"`
	Text           string                     `json:"text"`
	Main           *bool                      `json:"main"`
	Data           map[string]json.RawMessage `json:"data"`
	ExecutionCount *int                       `json:"execution_count"`
	Name           string                     `json:"name"`
	Value          string                     `json:"value"`
	Traceback      []string                   `json:"traceback"`
	Prompt         string                     `json:"prompt"`
	Password       *bool                      `json:"password"`
	Msg            *Msg                       `json:"msg"`
}

func (e event) text(mime string) string {
	var s string
	json.Unmarshal(e.Data[mime], &s)
	return s
}

// reader reads a stream the way a client does: Next, then Ack.
type reader struct {
	t    testing.TB
	a    *stream.Attachment
	last uint64 // seq of the last event read
	// within, if set, bounds the wait for each event instead of waitFor:
	// for what the kernel answers at once, so a missing answer fails the
	// test soon instead of after a minute.
	within time.Duration
}

func attach(t testing.TB, s *stream.Stream, from uint64) *reader {
	t.Helper()
	a, err := s.Attach(map[string]uint64{EventsChannel: from}, stream.DefaultWindow)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(a.Close)
	return &reader{t: t, a: a, last: from}
}

// next returns the next event, or the end (then ev is zero).
func (r *reader) next() (event, *stream.End) {
	r.t.Helper()
	bound := waitFor
	if r.within > 0 {
		bound = r.within
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	it, err := r.a.Next(ctx, nil, 1<<20)
	if err != nil {
		r.t.Fatalf("stream %d: nothing within %v: %v", r.a.Stream().ID, bound, err)
	}
	switch it.Kind {
	case stream.ItemEvent:
		// What the native protocol sends: the stream, the seq, and the
		// event: a relay's message, a cell's event body.
		ev := event{Stream: r.a.Stream().ID, Seq: it.Offset, Event: "cell"}
		if r.a.Stream().Kind == stream.KindChannels {
			m, err := DecodeMsg(it.Data)
			if err != nil {
				r.t.Fatalf("bad relay event: %v", err)
			}
			ev.Event, ev.Msg = "jupyter", &m
		} else if err := json.Unmarshal(it.Data, &ev); err != nil {
			r.t.Fatalf("bad event %s: %v", it.Data, err)
		}
		if ev.Seq != r.last+1 {
			r.t.Fatalf("event %s after seq %d on stream %d", it.Data, r.last, r.a.Stream().ID)
		}
		r.last = ev.Seq
		if err := r.a.Ack(map[string]uint64{EventsChannel: ev.Seq}); err != nil {
			r.t.Fatalf("ack: %v", err)
		}
		return ev, nil
	case stream.ItemEnd:
		return event{}, &it.End
	default:
		r.t.Fatalf("unexpected item %+v", it)
	}
	return event{}, nil
}

// untilStdout reads events until their stdout adds up to want (the
// kernel may split one print into several messages).
func (r *reader) untilStdout(want string) {
	r.t.Helper()
	var got strings.Builder
	for got.Len() < len(want) {
		ev, end := r.next()
		if end != nil {
			r.t.Fatalf("cell ended (%+v) after stdout %q, want %q", *end, got.String(), want)
		}
		if ev.Type == "stdout" {
			got.WriteString(ev.Text)
		}
	}
	if got.String() != want {
		r.t.Fatalf("stdout %q, want %q", got.String(), want)
	}
}

// all reads to the end.
func (r *reader) all() ([]event, stream.End) {
	r.t.Helper()
	var evs []event
	for {
		ev, end := r.next()
		if end != nil {
			return evs, *end
		}
		evs = append(evs, ev)
	}
}

// run executes code and reads its whole cell stream.
func run(t testing.TB, kernelID, code string) ([]event, stream.End) {
	t.Helper()
	s, _ := execute(t, kernelID, code, 0, false)
	return attach(t, s, 0).all()
}

func execute(t testing.TB, kernelID, code string, timeout time.Duration, allowStdin bool) (*stream.Stream, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, id, err := env.mgr.Execute(ctx, kernelID, code, timeout, allowStdin)
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	return s, id
}

func stdout(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == "stdout" {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func find(evs []event, typ string) (event, bool) {
	for _, e := range evs {
		if e.Type == typ {
			return e, true
		}
	}
	return event{}, false
}

func wantCode(t testing.TB, err error, code wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("got error %v, want a %s *wire.Error", err, code)
	}
}

func wantStatus(t testing.TB, end stream.End, status string) {
	t.Helper()
	if end.Reason != stream.ReasonDone || end.Status != status {
		t.Fatalf("end %+v, want done with status %s", end, status)
	}
}

// waitState polls List until the kernel is in state.
func waitState(t testing.TB, id string, state State) {
	t.Helper()
	waitStateOn(t, env.mgr, id, state)
}

// waitStateOn waits for a kernel of manager m to be in state.
func waitStateOn(t testing.TB, m *Manager, id string, state State) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		for _, info := range m.List() {
			if info.Kernel == id && info.State == state {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("kernel %s never became %s: %+v", id, state, m.List())
}
