package stream_test

import (
	"context"
	"errors"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

func newRegistry(t *testing.T, l stream.Limits) *stream.Registry {
	t.Helper()
	r := stream.NewRegistryWith(l)
	t.Cleanup(r.Close)
	return r
}

// TestBudgetNeverExceeded: block streams whose clients stall fill the
// budget and then wait; the budget is never exceeded, and once the
// clients read on, every byte arrives, in order, none lost.
func TestBudgetNeverExceeded(t *testing.T) {
	checkNoLeak(t)
	const (
		budget  = 1 << 20
		streams = 12
		size    = 600 << 10 // each alone fits; together they are 7 budgets
	)
	r := newRegistry(t, stream.Limits{Budget: budget})
	rng := rand.New(rand.NewSource(3))
	type one struct {
		s   *stream.Stream
		a   *stream.Attachment
		src []byte
	}
	all := make([]one, streams)
	for i := range all {
		s := r.Create(stream.Config{Kind: stream.KindProcess, Channels: []stream.ChannelSpec{byteChan("stdout", stream.Block, 4<<20)}})
		a, err := s.Attach(nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		all[i] = one{s, a, randBytes(rng, size)}
	}
	var writers sync.WaitGroup
	for _, o := range all {
		writers.Add(1)
		go func() {
			defer writers.Done()
			src := o.src
			for len(src) > 0 { // in pieces, as a pipe would give them
				n := min(len(src), 1+rng2(len(src)))
				if _, err := o.s.Log("stdout").Write(src[:n]); err != nil {
					t.Error(err)
					return
				}
				src = src[n:]
			}
			o.s.Finish(exitEnd(0))
		}()
	}
	// Nobody reads yet: the writers fill the budget and wait.
	if !eventually(func() bool { return r.Budget().Stats().Used > budget*7/8-64<<10 }) {
		t.Fatalf("budget never filled: %+v", r.Budget().Stats())
	}
	time.Sleep(100 * time.Millisecond)
	if st := r.Budget().Stats(); st.Peak > st.Limit {
		t.Fatalf("budget exceeded while clients stalled: %+v", st)
	}
	// Now every client reads and acknowledges.
	var readers sync.WaitGroup
	for _, o := range all {
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer o.a.Close()
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			items, err := reader{a: o.a, maxChunk: 64 << 10, ack: ackDataOnly}.run(ctx)
			if err != nil {
				t.Errorf("stream %d: %v", o.s.ID, err)
				return
			}
			v, err := checkBytes(items, "stdout", 0, o.src)
			if err != nil || v.delivered != size || v.gaps != 0 {
				t.Errorf("stream %d: %+v %v", o.s.ID, v, err)
			}
		}()
	}
	readers.Wait()
	writers.Wait()
	st := r.Budget().Stats()
	if st.Peak > st.Limit {
		t.Fatalf("budget exceeded: %+v", st)
	}
	for _, o := range all {
		if ls := o.s.Log("stdout").Stats(); ls.Lost != 0 {
			t.Fatalf("stream %d lost data: %+v", o.s.ID, ls)
		}
	}
	// Everything was read and acknowledged after the end: all given back
	// but the tails.
	if st.Used != st.Ended || st.Ended > streams*stream.ReadTail {
		t.Fatalf("after every stream was read: %+v, want at most the tails", st)
	}
}

var rngMu sync.Mutex
var rngShared = rand.New(rand.NewSource(4))

func rng2(n int) int {
	rngMu.Lock()
	defer rngMu.Unlock()
	return rngShared.Intn(min(n, 100<<10))
}

// fillWithHog starts a block stream, attached but never read, whose
// writer fills the budget (all but the floors' share) and then waits;
// hogDone closes when that write returns (after hog.Finish).
func fillWithHog(t *testing.T, r *stream.Registry, budget int64) (hog *stream.Stream, hogDone <-chan struct{}) {
	t.Helper()
	hog = r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Block, 4<<20)}})
	ha, err := hog.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ha.Close)
	done := make(chan struct{})
	go func() {
		defer close(done)
		hog.Log("stdout").Write(make([]byte, 4*budget)) // waits when its share is full
	}()
	if !eventually(func() bool { return r.Budget().Stats().Used > budget*7/8-64<<10 }) {
		t.Fatalf("budget never filled: %+v", r.Budget().Stats())
	}
	return hog, done
}

// TestBudgetDropAnnouncesGaps: a drop stream in a budget full of another
// stream's unread data keeps going, discarding its own oldest data with
// gaps; the budget holds.
func TestBudgetDropAnnouncesGaps(t *testing.T) {
	const budget = 512 << 10
	r := newRegistry(t, stream.Limits{Budget: budget})
	hog, hogDone := fillWithHog(t, r, budget)
	pty := r.Create(stream.Config{Kind: stream.KindPTY, Channels: []stream.ChannelSpec{byteChan("pty", stream.Drop, 4<<20)}})
	src := randBytes(rand.New(rand.NewSource(5)), 1<<20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pty.Log("pty").Write(src)
	}()
	if !within(done) {
		t.Fatal("a drop stream waited for a full budget")
	}
	// Attached before it ends: an ended stream nobody is attached to is
	// the first to go when a writer waits for room (the hog's does), and
	// would expire before it is read.
	a, err := pty.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pty.Finish(stream.End{Reason: stream.ReasonClosed})
	st := pty.Log("pty").Stats()
	if st.End != 1<<20 || st.Lost == 0 || st.Start == 0 || st.Start == st.End {
		t.Fatalf("drop stream stats %+v: want all written, the oldest discarded, the newest kept", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	items, err := reader{a: a, maxChunk: 64 << 10, ack: ackAll}.run(ctx)
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	v, err := checkBytes(items, "pty", 0, src)
	if err != nil || v.gaps != 1 || v.delivered == 0 || v.delivered+v.gapped != 1<<20 {
		t.Fatalf("%+v %v: want a gap, then the newest bytes", v, err)
	}
	if b := r.Budget().Stats(); b.Peak > b.Limit {
		t.Fatalf("budget exceeded: %+v", b)
	}
	hog.Finish(exitEnd(0))
	<-hogDone
}

// TestEndedOutputStaysWhenItsRoomIsNoUse: a writer above its floor waits
// for room in a budget that small streams, one of them ended and unread,
// have filled beyond the writer's share (into the floors' share). When
// the writer wakes and reclaims, expiring the ended stream would still leave its share
// full: the ended stream stays, and its reader gets every byte. Where
// expiring does give a writer room it still happens (the tests below, and
// TestLargeEventsExpireEndedStreams).
func TestEndedOutputStaysWhenItsRoomIsNoUse(t *testing.T) {
	const budget = 1 << 20
	r := newRegistry(t, stream.Limits{Budget: budget})
	hog, hogDone := fillWithHog(t, r, budget)
	// The floors' share: a running stream and an ended one nobody has
	// read, each below its floor.
	running := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Drop, 0)}})
	running.Log("stdout").Write(make([]byte, 48<<10))
	ended := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Drop, 0)}})
	src := randBytes(rand.New(rand.NewSource(9)), 48<<10)
	ended.Log("stdout").Write(src)
	ended.Finish(exitEnd(0))
	if used := r.Budget().Stats().Used; used < budget*7/8+64<<10 {
		t.Fatalf("the small streams did not fill the floors' share: %d bytes used", used)
	}
	// A client attaching to the hog wakes its waiting writer (without
	// giving it room), which tries again and reclaims; repeated until a
	// reclaim is seen, since one may come while the writer is not yet
	// waiting.
	before := stream.Reclaims(r)
	if !eventually(func() bool {
		if a, err := hog.Attach(nil, 0); err == nil {
			a.Close()
		}
		return stream.Reclaims(r) > before
	}) {
		t.Fatal("the waiting writer never woke to reclaim")
	}
	if r.Get(ended.ID) == nil {
		t.Fatalf("the ended stream expired for room the hog cannot use (budget %+v)", r.Budget().Stats())
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	a, err := ended.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	items, err := reader{a: a, maxChunk: 64 << 10, ack: ackAll}.run(ctx)
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := checkBytes(items, "stdout", 0, src); err != nil || v.gaps != 0 || v.delivered != uint64(len(src)) {
		t.Fatalf("%+v %v: want every byte of the ended stream", v, err)
	}
	if b := r.Budget().Stats(); b.Peak > b.Limit {
		t.Fatalf("budget exceeded: %+v", b)
	}
	hog.Finish(exitEnd(0))
	<-hogDone
}

// TestEndedStreamsExpireOldestFirst: beyond MaxEnded, the stream that
// ended first expires first (not the one created first); attached ones
// are kept; an expired id is told apart from one that never was.
func TestEndedStreamsExpireOldestFirst(t *testing.T) {
	r := newRegistry(t, stream.Limits{MaxEnded: 3})
	var ss []*stream.Stream
	for range 6 {
		ss = append(ss, r.Create(stream.Config{Kind: stream.KindProcess, Channels: []stream.ChannelSpec{byteChan("stdout", stream.Block, 0)}}))
	}
	held, err := ss[5].Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{5, 1, 3, 0, 4} { // ended in this order
		ss[i].Finish(exitEnd(0))
	}
	// Ended: ss[5] (attached), ss[1], ss[3], ss[0], ss[4] → over by two:
	// ss[1] and ss[3] expire.
	for i, want := range []bool{true, false, true, false, true, true} {
		if got := r.Get(ss[i].ID) != nil; got != want {
			t.Fatalf("stream %d kept %v, want %v", ss[i].ID, got, want)
		}
	}
	id := func(i int) uint64 { return ss[i].ID }
	next := ss[5].ID + 1 // the id the registry would issue next
	if !r.IsExpired(id(1)) || !r.IsExpired(id(3)) || r.IsExpired(id(0)) || r.IsExpired(id(2)) || r.IsExpired(next) || r.IsExpired(0) {
		t.Fatal("IsExpired does not tell expired ids from kept ones and ones never issued")
	}
	if r.Expired() != 2 {
		t.Fatalf("Expired() = %d, want 2", r.Expired())
	}
	held.Close()
	ss[2].Finish(exitEnd(0)) // one more: the oldest idle one is ss[5], now detached
	if r.Get(id(5)) != nil || r.Get(id(0)) == nil || r.Get(id(2)) == nil {
		t.Fatal("after its detach the oldest ended stream should expire first")
	}
	// ss[5] is the newest id the registry issued: expired, it is still
	// one that was.
	if !r.IsExpired(id(5)) || r.IsExpired(next) {
		t.Fatal("the newest issued id, expired, reads as never issued (or the next one as issued)")
	}
}

// TestEndedStreamsExpireByBytes: ended streams keep at most MaxEndedBytes
// of output together; the oldest goes first.
func TestEndedStreamsExpireByBytes(t *testing.T) {
	r := newRegistry(t, stream.Limits{MaxEndedBytes: 700 << 10})
	var ss []*stream.Stream
	for range 4 {
		s := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Drop, 0)}})
		s.Log("stdout").Write(make([]byte, 300<<10))
		ss = append(ss, s)
	}
	for _, s := range ss {
		s.Finish(exitEnd(0))
	}
	if r.Get(ss[0].ID) != nil || r.Get(ss[1].ID) != nil || r.Get(ss[2].ID) == nil || r.Get(ss[3].ID) == nil {
		t.Fatal("want the two oldest expired, the two newest kept")
	}
	if st := r.Budget().Stats(); st.Ended > 700<<10 || st.Ended == 0 {
		t.Fatalf("ended streams hold %d bytes", st.Ended)
	}
	// One stream alone over the bound stays while it is the newest: it was
	// in the budget while it ran, and whoever gave it that much output
	// means to read it.
	big := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Drop, 1<<20)}})
	big.Log("stdout").Write(make([]byte, 800<<10))
	big.Finish(exitEnd(0))
	if r.Get(big.ID) == nil || r.Get(ss[2].ID) != nil || r.Get(ss[3].ID) != nil {
		t.Fatal("want the big newest stream kept, the older ones expired")
	}
}

// TestReadStreamLetsGo: once everything an ended stream retains has been
// acknowledged, its buffers go at once but for its last ReadTail bytes,
// whether the last ack came on the attachment or after it (Acknowledge);
// a later attach gets a gap, then that tail.
func TestReadStreamLetsGo(t *testing.T) {
	r := newRegistry(t, stream.Limits{})
	const size = 1 << 20
	src := randBytes(rand.New(rand.NewSource(6)), size)
	mk := func() *stream.Stream {
		s := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Block, 0), byteChan("stderr", stream.Block, 0)}})
		s.Log("stdout").Write(src)
		return s
	}
	before := r.Budget().Stats().Used

	s := mk()
	a, _ := s.Attach(nil, 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	go s.Finish(exitEnd(0))
	if _, err := (reader{a: a, maxChunk: 1 << 20, ack: ackDataOnly}).run(ctx); err != nil {
		t.Fatal(err)
	}
	if m := s.Log("stdout").Memory(); m != stream.ReadTail {
		t.Fatalf("read and acknowledged after the end, %d bytes held, want the %d of the tail", m, stream.ReadTail)
	}
	a.Close()

	s2 := mk()
	a2, _ := s2.Attach(nil, 0)
	s2.Finish(exitEnd(0))
	if _, err := (reader{a: a2, maxChunk: 1 << 20, ack: ackNever}).run(ctx); err != nil {
		t.Fatal(err)
	}
	a2.Close()
	if s2.Log("stdout").Memory() < size {
		t.Fatal("let go before anyone acknowledged")
	}
	if err := s2.Acknowledge(map[string]uint64{"stdout": size + 1}); !errors.Is(err, stream.ErrCursorAhead) {
		t.Fatalf("ack beyond the end: %v", err)
	}
	if err := s2.Acknowledge(map[string]uint64{"stdout": size}); err != nil {
		t.Fatal(err)
	}
	if m := s2.Log("stdout").Memory(); m != stream.ReadTail {
		t.Fatalf("acknowledged after its attachment ended, %d bytes held", m)
	}
	if used := r.Budget().Stats().Used; used != before+2*stream.ReadTail {
		t.Fatalf("budget used %d, %d before the streams", used, before)
	}
	a3, _ := s2.Attach(nil, 0)
	defer a3.Close()
	items, err := (reader{a: a3, maxChunk: 1 << 20}).run(ctx)
	if err != nil || len(items) != 3 || items[0].Kind != stream.ItemGap || items[0].To != size-stream.ReadTail || items[2].Kind != stream.ItemEnd {
		t.Fatalf("attach after the stream let go: %s %v, want a gap, the tail, the end", describeAll(items), err)
	}
	if _, err := checkBytes(items, "stdout", 0, src); err != nil {
		t.Fatal(err)
	}
}

// TestAcknowledgedOutputGoes: a running stream keeps only what its
// attached clients have not all acknowledged: a reader that acknowledges
// as it goes holds a command's output to a chunk or two, however much it
// prints, while a second attached client that acknowledges nothing keeps
// all of it.
func TestAcknowledgedOutputGoes(t *testing.T) {
	r := newRegistry(t, stream.Limits{})
	s := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Drop, 16<<20)}})
	a, _ := s.Attach(nil, 0)
	defer a.Close()
	chunk := randBytes(rand.New(rand.NewSource(7)), 256<<10)
	var peak int
	for range 32 { // 8 MiB, each piece read and acknowledged before the next
		s.Log("stdout").Write(chunk)
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		it, err := a.Next(ctx, nil, 1<<20)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Ack(map[string]uint64{"stdout": it.Offset + uint64(len(it.Data))}); err != nil {
			t.Fatal(err)
		}
		it.Release()
		peak = max(peak, s.Log("stdout").Memory())
	}
	if peak > 1<<20 {
		t.Fatalf("a reader that acknowledged as it went: %d bytes held at the most", peak)
	}
	slow, _ := s.Attach(map[string]uint64{"stdout": s.Log("stdout").Stats().End}, 0)
	defer slow.Close()
	for range 8 {
		s.Log("stdout").Write(chunk)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		it, err := a.Next(ctx, nil, 1<<20)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		a.Ack(map[string]uint64{"stdout": it.Offset + uint64(len(it.Data))})
		it.Release()
		if it.Offset+uint64(len(it.Data)) == s.Log("stdout").Stats().End {
			break
		}
	}
	if m := s.Log("stdout").Memory(); m < 2<<20 {
		t.Fatalf("%d bytes held while an attached client has acknowledged none of 2 MiB", m)
	}
}

// TestReservation: a `buffer` is set aside whole or refused; a stream
// with one keeps writing up to it however full the budget is.
func TestReservation(t *testing.T) {
	r := newRegistry(t, stream.Limits{Budget: 2 << 20})
	res, err := r.Reserve(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reserve(1 << 20); !errors.Is(err, stream.ErrBudget) {
		t.Fatalf("second reservation beyond the budget: %v", err)
	}
	s := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Block, 1<<20)}, Reservation: res})
	res.Release() // used by Create: no effect
	// Another stream takes everything else and waits.
	hog := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Block, 4<<20)}})
	ha, _ := hog.Attach(nil, 0)
	defer ha.Close()
	hogDone := make(chan struct{})
	go func() {
		defer close(hogDone)
		hog.Log("stdout").Write(make([]byte, 3<<20))
	}()
	if !eventually(func() bool { return r.Budget().Stats().Used > (2<<20)*7/8-64<<10 }) {
		t.Fatalf("budget never filled: %+v", r.Budget().Stats())
	}
	sa, _ := s.Attach(nil, 0)
	defer sa.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Log("stdout").Write(make([]byte, 1<<20-2*256<<10))
	}()
	if !within(done) {
		t.Fatal("a stream waited for budget it had set aside")
	}
	if st := r.Budget().Stats(); st.Peak > st.Limit {
		t.Fatalf("budget exceeded: %+v", st)
	}
	hog.Finish(exitEnd(0))
	<-hogDone
	s.Finish(exitEnd(0))
	unused, err := r.Reserve(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	unused.Release()
	unused.Release()
}

// TestRefusedBufferExpiresNothing: a `buffer` the budget cannot set aside
// even with every ended stream gone is refused without any of them
// expiring; one that fits once the oldest go has them go.
func TestRefusedBufferExpiresNothing(t *testing.T) {
	const budget = 2 << 20
	r := newRegistry(t, stream.Limits{Budget: budget, MaxEndedBytes: budget})
	var ended []*stream.Stream
	for range 3 {
		s := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Drop, 0)}})
		s.Log("stdout").Write(make([]byte, 400<<10))
		s.Finish(exitEnd(0))
		ended = append(ended, s)
	}
	if _, err := r.Reserve(budget); !errors.Is(err, stream.ErrBudget) {
		t.Fatalf("a buffer the size of the whole budget: %v", err)
	}
	if r.Expired() != 0 {
		t.Fatalf("%d ended streams expired for a buffer that was refused anyway", r.Expired())
	}
	res, err := r.Reserve(budget*7/8 - 600<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if r.Get(ended[0].ID) != nil || r.Get(ended[2].ID) == nil {
		t.Fatal("want the oldest ended stream expired for the buffer, the newest kept")
	}
}

// TestLargeEventsExpireEndedStreams: a budget full of ended streams nobody
// is attached to makes room for a running stream's events, however large
// and however quickly they come; none of them is dropped while an ended
// stream could expire instead.
func TestLargeEventsExpireEndedStreams(t *testing.T) {
	const size = 1 << 20
	r := newRegistry(t, stream.Limits{Budget: 8 << 20, MaxEndedBytes: 8 << 20})
	for range 12 {
		s := r.Create(stream.Config{Channels: []stream.ChannelSpec{eventChan("events", stream.Drop, 0)}})
		if _, err := s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, size/2) }); err != nil {
			t.Fatal(err)
		}
		s.Finish(exitEnd(0))
	}
	expired := r.Expired()
	for range 4 {
		s := r.Create(stream.Config{Channels: []stream.ChannelSpec{eventChan("events", stream.Drop, 0)}})
		a, _ := s.Attach(nil, 0)
		if _, err := s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, size) }); err != nil {
			t.Fatal(err)
		}
		if it := nextWithin(t, a, size); it.Kind != stream.ItemEvent || len(it.Data) != size {
			t.Fatalf("a 1 MiB event in a full budget: got %s", describe(it))
		}
		a.Close()
		s.Finish(exitEnd(0))
	}
	if r.Expired() == expired {
		t.Fatal("no ended stream expired to make room")
	}
}
