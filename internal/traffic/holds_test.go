package traffic

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// newHeldCounter is a counter on a settable clock with a 60 s idle
// policy, closed at the end of the test.
func newHeldCounter(t *testing.T) (*Counter, interface{ Advance(time.Duration) }) {
	c, clock := newFakeCounter()
	if err := c.SetMaxIdle(60); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, clock
}

// bindStream makes a stream hold on a fake stream; closing the channel
// ends the stream.
func bindStream(t *testing.T, c *Counter, id uint64) (HoldInfo, chan struct{}) {
	t.Helper()
	r, err := c.Holds().Reserve()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	return r.Bind(id, done), done
}

func wantIdle(t *testing.T, c *Counter, idle bool, idleMs int64) Snapshot {
	t.Helper()
	s := c.Snapshot()
	if s.Idle != idle || s.IdleMs != idleMs {
		t.Fatalf("idle %v after %d ms, want %v after %d ms: %+v", s.Idle, s.IdleMs, idle, idleMs, s)
	}
	return s
}

// A silent stream with a hold keeps the sandbox awake however long it
// runs (within the maximum); once it ends, the idle clock starts from
// that moment, not from the last byte.
func TestStreamHoldKeepsAwake(t *testing.T) {
	c, clock := newHeldCounter(t)
	c.In(10)
	info, done := bindStream(t, c, 7)
	if info.Stream != 7 || !info.Counting || info.Hold == "" || info.TTLMs != 0 {
		t.Fatalf("stream hold: %+v", info)
	}
	clock.Advance(10 * time.Minute)
	s := wantIdle(t, c, false, 0)
	if len(s.Holds) != 1 || s.Holds[0].Hold != info.Hold || !s.Holds[0].Counting {
		t.Fatalf("holds listed: %+v", s.Holds)
	}
	if want := info.CreatedUnixMs + DefaultMaxHold.Milliseconds(); s.Holds[0].ExpiresUnixMs != want {
		t.Fatalf("a stream hold expires at %d, want its maximum %d", s.Holds[0].ExpiresUnixMs, want)
	}

	close(done)
	waitFor(t, func() bool { return len(c.Holds().List()) == 0 })
	wantIdle(t, c, false, 0)
	clock.Advance(59 * time.Second)
	wantIdle(t, c, false, 59000)
	clock.Advance(time.Second)
	wantIdle(t, c, true, 60000)
}

// The idle clock runs from the later of the last byte and the end of the
// last hold; holds that end while another counts do not restart it.
func TestLastHoldEndStartsTheClock(t *testing.T) {
	c, clock := newHeldCounter(t)
	_, first := bindStream(t, c, 1)
	_, second := bindStream(t, c, 2)
	clock.Advance(5 * time.Minute)
	close(first)
	waitFor(t, func() bool { return len(c.Holds().List()) == 1 })
	clock.Advance(5 * time.Minute)
	wantIdle(t, c, false, 0)
	close(second)
	waitFor(t, func() bool { return len(c.Holds().List()) == 0 })
	clock.Advance(30 * time.Second)
	wantIdle(t, c, false, 30000)
	c.Out(1) // a later byte counts from itself
	clock.Advance(40 * time.Second)
	wantIdle(t, c, false, 40000)
}

// A lease that is not renewed ends at its ttl; the idle clock starts
// then.
func TestLeaseExpires(t *testing.T) {
	c, clock := newHeldCounter(t)
	info, err := c.Holds().Lease(5*time.Minute, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Stream != 0 || info.TTLMs != 300000 || !info.Counting {
		t.Fatalf("lease: %+v", info)
	}
	if want := clockNowMs(c) + 300000; info.ExpiresUnixMs != want {
		t.Fatalf("lease expires at %d, want %d", info.ExpiresUnixMs, want)
	}
	clock.Advance(5*time.Minute - time.Millisecond)
	wantIdle(t, c, false, 0)
	clock.Advance(time.Millisecond)
	if s := wantIdle(t, c, false, 0); len(s.Holds) != 0 {
		t.Fatalf("an expired lease is still listed: %+v", s.Holds)
	}
	clock.Advance(time.Minute)
	wantIdle(t, c, true, 60000)
	if _, err := c.Holds().Renew(info.Hold, time.Minute); !errors.Is(err, ErrNoHold) {
		t.Fatalf("renewing an expired lease: %v", err)
	}
}

// A lease renewed before its end goes on, for as long as it is renewed;
// a renewal sets the ttl from now, shorter or longer.
func TestRenewedLeaseDoesNotExpire(t *testing.T) {
	c, clock := newHeldCounter(t)
	info, err := c.Holds().Lease(30*time.Second, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	for range 30 { // 10 minutes, 20 s at a time
		clock.Advance(20 * time.Second)
		r, err := c.Holds().Renew(info.Hold, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Hold != info.Hold || r.CreatedUnixMs != info.CreatedUnixMs || r.ExpiresUnixMs != clockNowMs(c)+30000 {
			t.Fatalf("renewed %+v, made %+v", r, info)
		}
		wantIdle(t, c, false, 0)
	}
	if _, err := c.Holds().Renew(info.Hold, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	if n := len(c.Holds().List()); n != 0 {
		t.Fatalf("a lease renewed for 2 s is listed 2 s later (%d holds)", n)
	}
}

// Past the maximum hold time a hold stops counting: the idle clock
// starts, the hold stays listed (not counting) until it ends, and a lease
// can no longer be renewed.
func TestMaxHoldStopsCounting(t *testing.T) {
	c, clock := newHeldCounter(t)
	if err := c.Holds().SetMax(time.Hour); err != nil {
		t.Fatal(err)
	}
	streamHold, _ := bindStream(t, c, 3)
	lease, err := c.Holds().Lease(time.Hour, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.ExpiresUnixMs != lease.CreatedUnixMs+3600000 || streamHold.ExpiresUnixMs != streamHold.CreatedUnixMs+3600000 {
		t.Fatalf("expiry beyond the maximum: %+v %+v", lease, streamHold)
	}
	clock.Advance(59 * time.Minute)
	if _, err := c.Holds().Renew(lease.Hold, time.Hour); err != nil {
		t.Fatal(err)
	}
	if l := c.Holds().List(); l[1].ExpiresUnixMs != lease.CreatedUnixMs+3600000 {
		t.Fatalf("a renewal went past the maximum: %+v", l[1])
	}
	clock.Advance(time.Minute)
	s := wantIdle(t, c, false, 0)
	if len(s.Holds) != 2 || s.Holds[0].Counting || s.Holds[1].Counting {
		t.Fatalf("holds past the maximum: %+v", s.Holds)
	}
	if _, err := c.Holds().Renew(lease.Hold, time.Minute); !errors.Is(err, ErrHoldPastMax) {
		t.Fatalf("renewing past the maximum: %v", err)
	}
	clock.Advance(time.Minute)
	s = wantIdle(t, c, true, 60000)
	if len(s.Holds) != 2 {
		t.Fatalf("holds past the maximum are no longer listed: %+v", s.Holds)
	}
	// Releasing a hold that stopped counting leaves the idle clock alone.
	if err := c.Holds().Release(streamHold.Hold); err != nil {
		t.Fatal(err)
	}
	wantIdle(t, c, true, 60000)
}

// Releasing ends a hold at once, a lease or a stream hold (the stream
// goes on); releasing it again is an error.
func TestRelease(t *testing.T) {
	c, clock := newHeldCounter(t)
	lease, err := c.Holds().Lease(time.Hour, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	streamHold, done := bindStream(t, c, 9)
	defer close(done)
	clock.Advance(10 * time.Minute)
	for _, id := range []string{lease.Hold, streamHold.Hold} {
		if err := c.Holds().Release(id); err != nil {
			t.Fatal(err)
		}
		if err := c.Holds().Release(id); !errors.Is(err, ErrNoHold) {
			t.Fatalf("second release: %v", err)
		}
	}
	clock.Advance(time.Minute)
	wantIdle(t, c, true, 60000)
}

// A resume keeps every hold, and gives leases their full ttl again so
// their clients have time to reconnect and renew.
func TestResumeKeepsHolds(t *testing.T) {
	c, clock := newHeldCounter(t)
	lease, err := c.Holds().Lease(time.Minute, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	streamHold, _ := bindStream(t, c, 4)
	clock.Advance(50 * time.Second)
	c.Resumed()
	clock.Advance(50 * time.Second)
	s := wantIdle(t, c, false, 0)
	if len(s.Holds) != 2 || s.Holds[0].Hold != lease.Hold || s.Holds[1].Hold != streamHold.Hold || !s.Holds[0].Counting {
		t.Fatalf("holds after a resume: %+v", s.Holds)
	}
	clock.Advance(10 * time.Second)
	if l := c.Holds().List(); len(l) != 1 || l[0].Hold != streamHold.Hold {
		t.Fatalf("the lease did not end a ttl after the resume: %+v", l)
	}
}

func TestHoldBadInput(t *testing.T) {
	c, _ := newHeldCounter(t)
	hs := c.Holds()
	for _, ttl := range []time.Duration{-time.Second, 0, time.Second - 1, time.Hour + 1, 1 << 62} {
		if _, err := hs.Lease(ttl, Owner{}); !errors.Is(err, ErrHoldTTL) {
			t.Errorf("Lease(%v): %v", ttl, err)
		}
	}
	lease, err := hs.Lease(time.Minute, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Renew(lease.Hold, -time.Minute); !errors.Is(err, ErrHoldTTL) {
		t.Errorf("Renew with a negative ttl: %v", err)
	}
	for _, id := range []string{"", "h0", "nonsense"} {
		if _, err := hs.Renew(id, time.Minute); !errors.Is(err, ErrNoHold) {
			t.Errorf("Renew(%q): %v", id, err)
		}
		if err := hs.Release(id); !errors.Is(err, ErrNoHold) {
			t.Errorf("Release(%q): %v", id, err)
		}
	}
	streamHold, done := bindStream(t, c, 5)
	defer close(done)
	if _, err := hs.Renew(streamHold.Hold, time.Minute); !errors.Is(err, ErrNotALease) {
		t.Errorf("renewing a stream hold: %v", err)
	}
	for _, d := range []time.Duration{-time.Hour, 0, time.Second - 1, MaxMaxHold + 1} {
		if err := hs.SetMax(d); !errors.Is(err, ErrMaxHold) {
			t.Errorf("SetMax(%v): %v", d, err)
		}
	}
	if hs.Max() != DefaultMaxHold {
		t.Fatalf("a refused maximum changed it to %v", hs.Max())
	}
	if err := hs.SetMax(time.Second); err != nil {
		t.Fatal(err)
	}
}

// The agent keeps at most MaxHolds stream holds (reservations included)
// and MaxLeases leases, apart: leases never take a stream's room. A
// refused one changes nothing.
func TestTooManyHolds(t *testing.T) {
	c, _ := newHeldCounter(t)
	hs := c.Holds()
	var last HoldInfo
	var err error
	for range MaxLeases {
		if last, err = hs.Lease(time.Minute, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hs.Lease(time.Minute, Owner{}); !errors.Is(err, ErrTooManyHolds) {
		t.Fatalf("lease beyond the cap: %v", err)
	}
	// Every lease taken: a stream's hold is still made.
	var rs []*Reservation
	for range MaxHolds {
		r, err := hs.Reserve()
		if err != nil {
			t.Fatalf("a stream hold refused while %d leases exist: %v", MaxLeases, err)
		}
		rs = append(rs, r)
	}
	if _, err := hs.Reserve(); !errors.Is(err, ErrTooManyHolds) {
		t.Fatalf("reservation beyond the cap: %v", err)
	}
	rs[0].Cancel()
	r, err := hs.Reserve()
	if err != nil {
		t.Fatalf("after a cancelled reservation: %v", err)
	}
	done := make(chan struct{})
	close(done)
	r.Bind(1, done)
	if err := hs.Release(last.Hold); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Lease(time.Minute, Owner{}); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	for _, r := range rs[1:] {
		r.Cancel()
	}
	if n := len(hs.List()); n > MaxHolds+MaxLeases {
		t.Fatalf("%d holds", n)
	}
}

// One connection gets MaxLeasesPerConn leases; others still get theirs,
// and a release gives the connection room again.
func TestLeasesPerConn(t *testing.T) {
	c, _ := newHeldCounter(t)
	hs := c.Holds()
	greedy, other := Owner{Conn: new(int), Client: "10.0.0.1"}, Owner{Conn: new(int), Client: "10.0.0.1"}
	var first HoldInfo
	for i := range MaxLeasesPerConn {
		info, err := hs.Lease(time.Minute, greedy)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = info
		}
	}
	_, err := hs.Lease(time.Minute, greedy)
	if !errors.Is(err, ErrTooManyHolds) || !strings.Contains(err.Error(), "this connection") {
		t.Fatalf("a lease beyond the connection's share: %v", err)
	}
	if _, err := hs.Lease(time.Minute, other); err != nil {
		t.Fatalf("another connection's lease: %v", err)
	}
	if _, err := hs.Renew(first.Hold, time.Minute); err != nil {
		t.Fatalf("renewing within the share: %v", err)
	}
	if err := hs.Release(first.Hold); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Lease(time.Minute, greedy); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}

// One client with many connections gets MaxLeasesPerClient leases in
// all, however many connections it opens: another client still gets its
// own.
func TestLeasesPerClient(t *testing.T) {
	c, _ := newHeldCounter(t)
	hs := c.Holds()
	made := 0
	for conn := 0; made < MaxLeasesPerClient; conn++ {
		owner := Owner{Conn: new(int), Client: "10.0.0.1"}
		for range min(MaxLeasesPerConn, MaxLeasesPerClient-made) {
			if _, err := hs.Lease(time.Minute, owner); err != nil {
				t.Fatalf("lease %d: %v", made, err)
			}
			made++
		}
	}
	_, err := hs.Lease(time.Minute, Owner{Conn: new(int), Client: "10.0.0.1"})
	if !errors.Is(err, ErrTooManyHolds) || !strings.Contains(err.Error(), "this client (10.0.0.1)") {
		t.Fatalf("a lease beyond the client's share, on a new connection: %v", err)
	}
	other := Owner{Conn: new(int), Client: "10.0.0.2"}
	for i := range MaxLeasesPerConn {
		if _, err := hs.Lease(time.Minute, other); err != nil {
			t.Fatalf("another client's lease %d: %v", i, err)
		}
	}
}

// Holds made, renewed, released and read from many goroutines, with
// streams ending meanwhile, keep their books straight (run with -race).
func TestHoldsConcurrently(t *testing.T) {
	c, clock := newHeldCounter(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				l, err := c.Holds().Lease(time.Minute, Owner{})
				if err != nil {
					t.Error(err)
					return
				}
				r, err := c.Holds().Reserve()
				if err != nil {
					t.Error(err)
					return
				}
				done := make(chan struct{})
				s := r.Bind(uint64(g*1000+i+1), done)
				c.Snapshot()
				if _, err := c.Holds().Renew(l.Hold, 2*time.Minute); err != nil {
					t.Error(err)
				}
				close(done)
				if err := c.Holds().Release(l.Hold); err != nil {
					t.Error(err)
				}
				c.Holds().Release(s.Hold) // may have ended already
				clock.Advance(time.Millisecond)
			}
		})
	}
	wg.Wait()
	waitFor(t, func() bool { return len(c.Holds().List()) == 0 })
	clock.Advance(time.Minute)
	if !c.Snapshot().Idle {
		t.Fatalf("not idle a minute after every hold ended: %+v", c.Snapshot())
	}
}

// Close stops the goroutines that wait for streams to end.
func TestCloseStopsWatchers(t *testing.T) {
	c, _ := newFakeCounter()
	for i := range 10 {
		r, err := c.Holds().Reserve()
		if err != nil {
			t.Fatal(err)
		}
		r.Bind(uint64(i+1), make(chan struct{}))
	}
	c.Close() // returns only once every watcher did
	c.Close()
}

func clockNowMs(c *Counter) int64 { return c.clock.Now().UnixMilli() }

// TestDropLeases: a new sandbox drops its template's leases; holds bound
// to running streams stay.
func TestDropLeases(t *testing.T) {
	c, _ := newHeldCounter(t)
	if _, err := c.Holds().Lease(time.Minute, Owner{}); err != nil {
		t.Fatal(err)
	}
	bindStream(t, c, 7)
	if n := c.Holds().DropLeases(); n != 1 {
		t.Fatalf("dropped %d leases, want 1", n)
	}
	list := c.Holds().List()
	if len(list) != 1 || list[0].Stream != 7 {
		t.Fatalf("holds after: %+v", list)
	}
}
