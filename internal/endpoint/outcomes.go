package endpoint

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Exactly-once requests (protocol section 11.13). A client names a request
// that starts or changes something with an op_id. The agent keeps the
// request's outcome, and a repeat of the op_id (sent after a resume's cut
// or a dropped connection left the client without its answer) gets that
// outcome instead of a second execution, on whatever connection it comes,
// while the first still runs or after.
//
// An outcome is kept for keepOutcome after it was answered, and one that
// names a stream for as long as the stream can be attached; at most
// maxOutcomes of them, the oldest let go first. Of an outcome let go the
// agent keeps only that its op_id ran (a hash, for keepRan, at most
// maxRan), so a late repeat gets `expired` rather than a second run.
const (
	keepOutcome = 10 * time.Minute // as long as an ended stream is kept
	maxOutcomes = 4096
	keepRan     = 24 * time.Hour
	maxRan      = 1 << 16 // 8 bytes and a map entry each: at most about 2 MiB
)

// outcome is one op_id's request: running until done is closed, then
// answered with result or err.
type outcome struct {
	id     string
	params uint64        // hash of the request's op and parameters
	done   chan struct{} // closed once answered or given up
	// Set before done is closed:
	result any
	err    *wire.Error
	stream uint64 // the stream the request made, 0 if none
	notRun bool   // given up before it ran (its connection ended): run it again
	at     time.Time
}

// outcomes is the agent's table of op_ids. Its zero value is not usable:
// newOutcomes.
type outcomes struct {
	seed maphash.Seed
	// alive says whether a stream can still be attached.
	alive func(id uint64) bool

	mu       sync.Mutex
	instance string // the agent identity the table belongs to
	byID     map[string]*outcome
	order    []*outcome // by first arrival: the oldest is let go first
	ran      map[uint64]time.Time
	ranOrder []uint64
	// keep and max are keepOutcome and maxOutcomes (tests shorten them).
	keep time.Duration
	max  int
}

func newOutcomes(alive func(uint64) bool) *outcomes {
	return &outcomes{seed: maphash.MakeSeed(), alive: alive, byID: map[string]*outcome{}, ran: map[uint64]time.Time{}, keep: keepOutcome, max: maxOutcomes}
}

// begin finds the outcome of req's op_id, or registers a new one. first
// says the caller runs the request and then calls finish (or abandon);
// otherwise it waits for o.done. A repeat with other parameters, or of an
// op_id whose outcome was let go, is an error.
func (t *outcomes) begin(instance string, req wire.Request) (o *outcome, first bool, err error) {
	params := t.hashParams(req)
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.instance != instance {
		// A new identity (section 11.7): the last one's outcomes are not
		// this sandbox's. Repeats for it name its instance and are refused
		// before they get here.
		t.instance = instance
		t.byID, t.order = map[string]*outcome{}, nil
		t.ran, t.ranOrder = map[uint64]time.Time{}, nil
	}
	t.sweepLocked(now)
	if o := t.byID[req.OpID]; o != nil {
		if o.params != params {
			return nil, false, wire.Errorf(wire.CodeConflict, "op_id %q was used for another request (%s with other parameters); use a new op_id for a new request", req.OpID, req.Op)
		}
		if !t.expiredLocked(o) {
			return o, false, nil
		}
		t.letGoLocked(o, now)
	}
	if _, ok := t.ran[t.hashID(req.OpID)]; ok {
		return nil, false, wire.Errorf(wire.CodeExpired, "op_id %q ran, but its outcome is no longer kept (outcomes are kept %v after the answer, a stream's while it can be attached, at most %d); it is not run again", req.OpID, t.keep, t.max)
	}
	o = &outcome{id: req.OpID, params: params, done: make(chan struct{})}
	t.byID[o.id] = o
	t.order = append(t.order, o)
	return o, true, nil
}

// finish records the answer of a request begin registered.
func (t *outcomes) finish(o *outcome, result any, err *wire.Error, stream uint64) {
	t.mu.Lock()
	o.result, o.err, o.stream, o.at = result, err, stream, time.Now()
	t.mu.Unlock()
	close(o.done)
}

// abandon forgets a request that never ran (its connection ended before
// its turn): a repeat runs it.
func (t *outcomes) abandon(o *outcome) {
	t.mu.Lock()
	if t.byID[o.id] == o {
		delete(t.byID, o.id)
	}
	o.notRun = true
	t.mu.Unlock()
	close(o.done)
}

// expiredLocked says whether an answered outcome is past keeping.
func (t *outcomes) expiredLocked(o *outcome) bool {
	select {
	case <-o.done:
	default:
		return false // still running
	}
	if o.stream != 0 {
		return !t.alive(o.stream)
	}
	return time.Since(o.at) > t.keep
}

// sweepLocked lets go of the oldest outcomes while there are too many,
// or while the oldest is past keeping; it stops at the first one kept, so
// an outcome behind a long-running stream's waits for the count to reach
// it.
func (t *outcomes) sweepLocked(now time.Time) {
	for len(t.order) > 0 {
		o := t.order[0]
		if t.byID[o.id] == o && len(t.order) <= t.max && !t.expiredLocked(o) {
			break
		}
		t.order = t.order[1:]
		if t.byID[o.id] == o {
			t.letGoLocked(o, now)
		}
	}
	for len(t.ranOrder) > 0 {
		h := t.ranOrder[0]
		if len(t.ranOrder) <= maxRan && now.Sub(t.ran[h]) <= keepRan {
			break
		}
		t.ranOrder = t.ranOrder[1:]
		delete(t.ran, h)
	}
}

// letGoLocked keeps only that o's op_id ran.
func (t *outcomes) letGoLocked(o *outcome, now time.Time) {
	delete(t.byID, o.id)
	h := t.hashID(o.id)
	if _, ok := t.ran[h]; !ok {
		t.ranOrder = append(t.ranOrder, h)
	}
	t.ran[h] = now
}

// Len is how many outcomes are kept (tests).
func (t *outcomes) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

func (t *outcomes) hashID(id string) uint64 { return maphash.String(t.seed, id) }

// hashParams hashes what makes a request the same request: its op and its
// parameters, whatever their order and spacing, but not id, op_id,
// instance and attach, which a repeat may change (attach says whether
// the connection that sends it follows the stream, not what runs).
func (t *outcomes) hashParams(req wire.Request) uint64 {
	var fields map[string]json.RawMessage
	json.Unmarshal(req.Raw, &fields) // an object: DecodeRequest checked
	names := make([]string, 0, len(fields))
	for name := range fields {
		switch name {
		case "id", "op_id", "instance", "attach":
		default:
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var h maphash.Hash
	h.SetSeed(t.seed)
	var buf bytes.Buffer
	for _, name := range names {
		h.WriteString(name)
		h.WriteByte(0)
		buf.Reset()
		if json.Compact(&buf, fields[name]) != nil {
			h.Write(fields[name])
		} else {
			h.Write(buf.Bytes())
		}
		h.WriteByte(0)
	}
	return h.Sum64()
}

// streamAlive is outcomes' test of a stream for a registry.
func streamAlive(r *stream.Registry) func(uint64) bool {
	return func(id uint64) bool { return r != nil && r.Get(id) != nil }
}
