package traffic

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Holds keep the idle clock from running while the sandbox is busy
// without a byte crossing the endpoint: a job that prints nothing (a
// stream hold, made by a surface for a stream it started) or a client
// waiting on something outside the sandbox (a lease, renewed by the client
// until it releases it). While any hold counts, the sandbox is not idle;
// when the last one stops, the idle clock starts from that moment.
//
// A hold belongs to the agent, not to the connection that made it: it
// survives reconnects and resumes. Two bounds keep a forgotten hold from
// keeping a sandbox awake for ever: a lease ends unless renewed, and no
// hold counts for longer than the maximum hold time after it was made.
// A hold past that maximum stays listed, not counting, until it ends.
//
// Every time is read on the Counter's clock; expiry needs no timer, since
// each reading settles what has expired by then.
type Holds struct {
	clock Clock

	mu       sync.Mutex
	max      time.Duration
	holds    []*hold       // oldest first; at most MaxHolds + MaxLeases, so searched
	reserved int           // slots claimed by Reserve and not yet bound
	stopped  time.Duration // monotonic: when the latest hold stopped counting
	done     chan struct{} // closed by close: stream watchers return
	wg       sync.WaitGroup
}

// Bounds of holds.
const (
	// MinHoldTTL is the shortest lease: a shorter one would have to be
	// renewed faster than a client can reconnect after a resume.
	MinHoldTTL = time.Second
	// MaxHoldTTL is the longest lease: how long a client that died keeps
	// its sandbox awake at worst. Longer waits renew.
	MaxHoldTTL = time.Hour
	// DefaultMaxHold is how long a hold counts at most: the sandbox's
	// maximum lifetime on the platform.
	DefaultMaxHold = 8 * time.Hour
	// MaxMaxHold bounds the maximum hold time itself: ten years is
	// forever for a sandbox and far from overflowing a time.Duration.
	MaxMaxHold = 10 * 365 * 24 * time.Hour
	// MaxHolds is how many stream holds (keep_awake) the agent keeps at
	// once, MaxLeases how many leases: far more than honest use needs,
	// few enough that a runaway client cannot grow the agent's memory or
	// its traffic report without bound. The two are apart so that leases,
	// which any client makes at will, never take a stream's room: a
	// silent job's keep_awake is refused only when MaxHolds jobs hold.
	MaxHolds  = 1024
	MaxLeases = 1024
	// MaxLeasesPerConn bounds the leases made on one connection, and
	// MaxLeasesPerClient those of one client (surface.ClientOf) on all
	// its connections, well below MaxLeases: one client that fills its
	// share, however many connections it opens, leaves room for the
	// others.
	MaxLeasesPerConn   = 64
	MaxLeasesPerClient = MaxLeases / 2
)

// Owner is who makes a lease, for its shares: the connection, and the
// client it is from. The zero Owner has no share, only the total.
type Owner struct {
	Conn   any
	Client string
}

// hold is one hold. Times are monotonic.
type hold struct {
	id       string
	stream   uint64 // 0 for a lease
	owner    Owner  // who made a lease, for its shares
	created  time.Duration
	wall     time.Time     // creation, for reports
	ttl      time.Duration // leases only
	leaseEnd time.Duration // leases only
	ended    bool          // stream holds: the stream ended at endedAt
	endedAt  time.Duration
}

func (h *hold) lease() bool { return h.stream == 0 }

// stopsAt is when the hold stops counting, unless renewed.
func (h *hold) stopsAt(maxHold time.Duration) time.Duration {
	s := h.created + maxHold
	if h.lease() {
		s = min(s, h.leaseEnd)
	}
	if h.ended {
		s = min(s, h.endedAt)
	}
	return s
}

// over says whether the hold is gone at now: its lease ran out or its
// stream ended. A hold past the maximum is not over.
func (h *hold) over(now time.Duration) bool {
	return h.ended || (h.lease() && h.leaseEnd <= now)
}

// HoldInfo is one hold as reported in /v1/traffic and op results.
type HoldInfo struct {
	Hold          string `json:"hold"`
	Stream        uint64 `json:"stream,omitempty"`
	CreatedUnixMs int64  `json:"created_unix_ms"`
	// ExpiresUnixMs is when the hold stops counting unless renewed: a
	// lease's end, or the maximum hold time, whichever comes first.
	ExpiresUnixMs int64 `json:"expires_unix_ms"`
	TTLMs         int64 `json:"ttl_ms,omitempty"` // leases only
	Counting      bool  `json:"counting"`
}

func newHolds(clock Clock) *Holds {
	return &Holds{clock: clock, max: DefaultMaxHold, done: make(chan struct{})}
}

// SetMax sets how long a hold counts at most, from a second to
// MaxMaxHold. It applies to existing holds too.
func (hs *Holds) SetMax(d time.Duration) error {
	if d < time.Second || d > MaxMaxHold {
		return fmt.Errorf("%w: got %v", ErrMaxHold, d)
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.settleLocked(hs.clock.Mono())
	hs.max = d
	return nil
}

// Max is how long a hold counts at most.
func (hs *Holds) Max() time.Duration {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.max
}

// Reservation is a claimed slot for a stream hold. A surface reserves
// before it starts the stream, so a refused hold has started nothing;
// then it calls Bind with the stream, or Cancel if the start failed.
type Reservation struct {
	hs   *Holds
	used bool
}

// Reserve claims a slot for a stream hold: ErrTooManyHolds if MaxHolds
// holds exist or are reserved.
func (hs *Holds) Reserve() (*Reservation, error) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.settleLocked(hs.clock.Mono())
	if err := hs.streamRoomLocked(); err != nil {
		return nil, err
	}
	hs.reserved++
	return &Reservation{hs: hs}, nil
}

// Bind turns the reservation into a hold on stream that counts until done
// is closed (the stream ended), it is released, or the maximum hold time
// passes. Call Bind or Cancel once.
func (r *Reservation) Bind(stream uint64, done <-chan struct{}) HoldInfo {
	hs := r.hs
	hs.mu.Lock()
	defer hs.mu.Unlock()
	r.useLocked()
	h := hs.newLocked(stream)
	select {
	case <-hs.done: // closed: the agent is stopping, nobody will read it
		return hs.infoLocked(h, hs.clock.Mono(), hs.clock.Now())
	default:
	}
	hs.wg.Add(1)
	go func() {
		defer hs.wg.Done()
		select {
		case <-done:
			hs.streamEnded(h)
		case <-hs.done:
		}
	}()
	return hs.infoLocked(h, hs.clock.Mono(), hs.clock.Now())
}

// Cancel gives the slot back.
func (r *Reservation) Cancel() {
	r.hs.mu.Lock()
	defer r.hs.mu.Unlock()
	r.useLocked()
}

func (r *Reservation) useLocked() {
	if r.used {
		panic("traffic: Reservation used twice")
	}
	r.used = true
	r.hs.reserved--
}

// streamEnded records the end of a stream hold's stream. A hold that was
// released meanwhile is gone and stays so.
func (hs *Holds) streamEnded(h *hold) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h.ended, h.endedAt = true, hs.clock.Mono()
}

// Lease makes a hold that counts for ttl unless renewed, on owner's
// shares of leases (the zero Owner: no share, only the total).
func (hs *Holds) Lease(ttl time.Duration, owner Owner) (HoldInfo, error) {
	if err := checkTTL(ttl); err != nil {
		return HoldInfo{}, err
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	now := hs.clock.Mono()
	hs.settleLocked(now)
	if err := hs.leaseRoomLocked(owner); err != nil {
		return HoldInfo{}, err
	}
	h := hs.newLocked(0)
	h.owner, h.ttl, h.leaseEnd = owner, ttl, now+ttl
	return hs.infoLocked(h, now, hs.clock.Now()), nil
}

// Renew makes lease id count for ttl from now (shorter or longer than
// before), never past the maximum hold time.
func (hs *Holds) Renew(id string, ttl time.Duration) (HoldInfo, error) {
	if err := checkTTL(ttl); err != nil {
		return HoldInfo{}, err
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	now := hs.clock.Mono()
	hs.settleLocked(now)
	_, h := hs.findLocked(id)
	switch {
	case h == nil:
		return HoldInfo{}, fmt.Errorf("%w: %q was released, expired or never made", ErrNoHold, id)
	case !h.lease():
		return HoldInfo{}, fmt.Errorf("%w: hold %s is kept by stream %d and ends with it", ErrNotALease, id, h.stream)
	case h.created+hs.max <= now:
		return HoldInfo{}, fmt.Errorf("%w: hold %s was made %v ago", ErrHoldPastMax, id, (now - h.created).Round(time.Second))
	}
	h.ttl, h.leaseEnd = ttl, now+ttl
	return hs.infoLocked(h, now, hs.clock.Now()), nil
}

// Release ends hold id now, a lease or a stream hold (whose stream runs
// on).
func (hs *Holds) Release(id string) error {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	now := hs.clock.Mono()
	hs.settleLocked(now)
	i, h := hs.findLocked(id)
	if h == nil {
		return fmt.Errorf("%w: %q was released, expired or never made", ErrNoHold, id)
	}
	hs.stopped = max(hs.stopped, min(h.stopsAt(hs.max), now))
	hs.holds = slices.Delete(hs.holds, i, i+1)
	return nil
}

// List returns the holds, oldest first.
func (hs *Holds) List() []HoldInfo {
	_, _, list := hs.settle(hs.clock.Mono(), hs.clock.Now())
	return list
}

// settle drops the holds that are over at now and says whether any still
// counts, when the latest one stopped, and what is left.
func (hs *Holds) settle(now time.Duration, wall time.Time) (held bool, stopped time.Duration, list []HoldInfo) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.settleLocked(now)
	list = make([]HoldInfo, len(hs.holds))
	for i, h := range hs.holds {
		list[i] = hs.infoLocked(h, now, wall)
		held = held || list[i].Counting
	}
	return held, hs.stopped, list
}

func (hs *Holds) settleLocked(now time.Duration) {
	kept := hs.holds[:0]
	for _, h := range hs.holds {
		if s := h.stopsAt(hs.max); s <= now {
			hs.stopped = max(hs.stopped, s)
			if h.over(now) {
				continue
			}
		}
		kept = append(kept, h)
	}
	clear(hs.holds[len(kept):])
	hs.holds = kept
}

func (hs *Holds) findLocked(id string) (int, *hold) {
	for i, h := range hs.holds {
		if h.id == id {
			return i, h
		}
	}
	return -1, nil
}

// resumed gives every lease that still counts its full ttl from now.
func (hs *Holds) resumed() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	now := hs.clock.Mono()
	hs.settleLocked(now)
	for _, h := range hs.holds {
		if h.lease() && h.stopsAt(hs.max) > now {
			h.leaseEnd = max(h.leaseEnd, now+h.ttl)
		}
	}
}

// close stops the stream watchers; holds already made stay as they are.
func (hs *Holds) close() {
	hs.mu.Lock()
	select {
	case <-hs.done:
	default:
		close(hs.done)
	}
	hs.mu.Unlock()
	hs.wg.Wait()
}

// streamRoomLocked says whether another stream hold fits, once settled.
// Leases do not count.
func (hs *Holds) streamRoomLocked() error {
	n := hs.reserved
	for _, h := range hs.holds {
		if !h.lease() {
			n++
		}
	}
	if n >= MaxHolds {
		return fmt.Errorf("%w: %d streams hold the sandbox awake; end one first", ErrTooManyHolds, MaxHolds)
	}
	return nil
}

// leaseRoomLocked says whether another lease of owner fits, once
// settled.
func (hs *Holds) leaseRoomLocked(owner Owner) error {
	all, conn, client := 0, 0, 0
	for _, h := range hs.holds {
		if !h.lease() {
			continue
		}
		all++
		if owner.Conn != nil && h.owner.Conn == owner.Conn {
			conn++
		}
		if owner != (Owner{}) && h.owner.Client == owner.Client {
			client++
		}
	}
	switch {
	case conn >= MaxLeasesPerConn:
		return fmt.Errorf("%w: this connection has %d leases, the most one may make; release one first", ErrTooManyHolds, MaxLeasesPerConn)
	case client >= MaxLeasesPerClient:
		return fmt.Errorf("%w: this client (%s) has %d leases on all its connections, its share of the %d the agent keeps; release one first", ErrTooManyHolds, clientName(owner.Client), client, MaxLeases)
	case all >= MaxLeases:
		return fmt.Errorf("%w: the agent has %d leases; release one first", ErrTooManyHolds, MaxLeases)
	}
	return nil
}

func clientName(c string) string {
	if c == "" {
		return "unknown address"
	}
	return c
}

func (hs *Holds) newLocked(stream uint64) *hold {
	h := &hold{id: hs.newIDLocked(), stream: stream, created: hs.clock.Mono(), wall: hs.clock.Now()}
	hs.holds = append(hs.holds, h)
	return h
}

// newIDLocked makes an id no hold has: random, so a client that renews
// after the agent restarted gets not_found rather than another's hold.
func (hs *Holds) newIDLocked() string {
	for {
		var b [8]byte
		rand.Read(b[:])
		id := "h" + hex.EncodeToString(b[:])
		if _, h := hs.findLocked(id); h == nil {
			return id
		}
	}
}

func (hs *Holds) infoLocked(h *hold, now time.Duration, wall time.Time) HoldInfo {
	stop := h.stopsAt(hs.max)
	i := HoldInfo{
		Hold:          h.id,
		Stream:        h.stream,
		CreatedUnixMs: h.wall.UnixMilli(),
		ExpiresUnixMs: wall.Add(stop - now).UnixMilli(),
		Counting:      stop > now,
	}
	if h.lease() {
		i.TTLMs = h.ttl.Milliseconds()
	}
	return i
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinHoldTTL || ttl > MaxHoldTTL {
		return fmt.Errorf("%w: got %v", ErrHoldTTL, ttl)
	}
	return nil
}

// DropLeases ends every lease now (a new sandbox made from a snapshot
// must not be kept awake by its template's clients); holds bound to
// running streams stay with their streams. It returns how many went.
func (hs *Holds) DropLeases() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	now := hs.clock.Mono()
	hs.settleLocked(now)
	kept := hs.holds[:0]
	for _, h := range hs.holds {
		if h.lease() {
			hs.stopped = max(hs.stopped, min(h.stopsAt(hs.max), now))
			continue
		}
		kept = append(kept, h)
	}
	n := len(hs.holds) - len(kept)
	clear(hs.holds[len(kept):])
	hs.holds = kept
	return n
}
