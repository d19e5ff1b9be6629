package snowflake

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/clock/clocktest"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func newFake(t *testing.T, cfg Config) (*Generator, *clocktest.Fake) {
	t.Helper()
	fc := clocktest.New(t0)
	cfg.Guard = clock.NewGuard(clock.GuardConfig{Clock: fc}, 0)
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, fc
}

func ms(t *testing.T, g *Generator, id int64) int64 {
	t.Helper()
	p, err := g.Layout().Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	return p.UnixMs
}

func TestClockSteps(t *testing.T) {
	tests := []struct {
		name      string
		step      time.Duration
		wantErr   bool
		wantAbove bool // the next ID's time is above the previous one's
	}{
		{"forward", 10 * time.Millisecond, false, true},
		{"same millisecond", 0, false, false},
		{"back 3ms is waited out", -3 * time.Millisecond, false, false},
		{"back exactly 5ms is waited out", -5 * time.Millisecond, false, false},
		{"back 50ms is refused", -50 * time.Millisecond, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, fc := newFake(t, Config{IDC: 1, Node: 3})
			first, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			fc.Add(tc.step)
			next, err := g.Next()
			if tc.wantErr {
				var rb *clock.RollbackError
				if !errors.As(err, &rb) || !errors.Is(err, clock.ErrRollback) {
					t.Fatalf("err = %v, want *clock.RollbackError", err)
				}
				if rb.Behind != -tc.step {
					t.Fatalf("Behind = %v, want %v", rb.Behind, -tc.step)
				}
				// Once the clock has caught up, IDs flow again and are higher.
				fc.Add(-tc.step + time.Millisecond)
				if next, err = g.Next(); err != nil {
					t.Fatalf("after catching up: %v", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if next <= first {
				t.Fatalf("next %d <= first %d", next, first)
			}
			if tc.wantAbove && ms(t, g, next) <= ms(t, g, first) {
				t.Fatalf("timestamp did not advance: %d -> %d", ms(t, g, first), ms(t, g, next))
			}
		})
	}
}

func TestNeverLowerTimestampUnderRandomSteps(t *testing.T) {
	g, fc := newFake(t, Config{})
	steps := []time.Duration{1, -2, 0, 3, -4, -5, 7, -1, 0, 2, -3, 9, -60, 61, 1}
	var lastMs int64
	var lastID int64
	for i := 0; i < 2000; i++ {
		fc.Add(steps[i%len(steps)] * time.Millisecond)
		id, err := g.Next()
		if errors.Is(err, clock.ErrRollback) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		m := ms(t, g, id)
		if m < lastMs || id <= lastID {
			t.Fatalf("step %d: id %d (ms %d) after id %d (ms %d)", i, id, m, lastID, lastMs)
		}
		lastMs, lastID = m, id
	}
}

func TestSequenceExhaustionMovesToNextMillisecond(t *testing.T) {
	g, _ := newFake(t, Config{})
	seen := make(map[int64]bool)
	var prev int64
	for i := 0; i < 3*(MaxSequence+1)+17; i++ {
		id, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] || id <= prev {
			t.Fatalf("id %d repeated or not increasing after %d", id, prev)
		}
		seen[id], prev = true, id
	}
	p, _ := g.Layout().Parse(prev)
	if p.UnixMs != t0.UnixMilli()+3 || p.Sequence != 16 {
		t.Fatalf("last id at ms+%d seq %d, want ms+3 seq 16", p.UnixMs-t0.UnixMilli(), p.Sequence)
	}
}

func TestBatchAcrossMillisecondBoundary(t *testing.T) {
	g, _ := newFake(t, Config{IDC: 2, Node: 200})
	if _, err := g.NextN(4000); err != nil {
		t.Fatal(err)
	}
	rs, err := g.NextN(200) // 96 left in this ms, 104 in the next
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Last-rs[0].First+1 != 96 || rs[1].Last-rs[1].First+1 != 104 {
		t.Fatalf("ranges %+v, want 96 + 104", rs)
	}
	a, _ := g.Layout().Parse(rs[0].Last)
	b, _ := g.Layout().Parse(rs[1].First)
	if b.UnixMs != a.UnixMs+1 || a.Sequence != MaxSequence || b.Sequence != 0 || a.Worker != b.Worker || a.IDC != 2 || a.Node != 200 {
		t.Fatalf("boundary parts %+v -> %+v", a, b)
	}
	big, err := g.NextN(10000)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for i, r := range big {
		n += r.Last - r.First + 1
		if i > 0 && r.First <= big[i-1].Last {
			t.Fatalf("ranges overlap or go down: %+v", big)
		}
	}
	if n != 10000 {
		t.Fatalf("got %d IDs, want 10000", n)
	}
}

func TestNotBeforeAndHighWater(t *testing.T) {
	fc := clocktest.New(t0)
	g, err := New(Config{Guard: clock.NewGuard(clock.GuardConfig{Clock: fc}, 0), NotBefore: t0.UnixMilli() + 2, HighWater: t0.UnixMilli() + 10})
	if err != nil {
		t.Fatal(err)
	}
	id, err := g.Next() // waits (fake sleep) past NotBefore
	if err != nil {
		t.Fatal(err)
	}
	if got := ms(t, g, id); got <= t0.UnixMilli()+2 {
		t.Fatalf("issued at %d, not after NotBefore %d", got, t0.UnixMilli()+2)
	}
	fc.Add(20 * time.Millisecond)
	if _, err := g.Next(); !errors.Is(err, ErrBeyondHighWater) {
		t.Fatalf("err = %v, want ErrBeyondHighWater", err)
	}
	g.Extend(t0.UnixMilli() + 100)
	if _, err := g.Next(); err != nil {
		t.Fatalf("after Extend: %v", err)
	}
	g.Extend(1) // never lowers
	if g.HighWater() != t0.UnixMilli()+100 {
		t.Fatalf("HighWater lowered to %d", g.HighWater())
	}
}

// TestNotBeforeFarAheadIsAFastWait: a slot whose NotBefore is ahead of the
// clock answers at once with a WaitError saying how long (issue 10: answer
// from the first moment, never sleep), then serves above NotBefore.
func TestNotBeforeFarAheadIsAFastWait(t *testing.T) {
	fc := clocktest.New(t0)
	guard := clock.NewGuard(clock.GuardConfig{Clock: fc}, 0)
	g, err := New(Config{Guard: guard, NotBefore: t0.UnixMilli() + 1000})
	if err != nil {
		t.Fatal(err)
	}
	fc.OnSleep(func(time.Duration) { t.Fatal("the generator slept instead of refusing") })
	_, err = g.Next()
	var we *WaitError
	if !errors.As(err, &we) || !errors.Is(err, ErrNotYet) || we.RetryAfter() != 1001*time.Millisecond {
		t.Fatalf("err = %v, want a WaitError with 1001ms to go", err)
	}
	if guard.Last() != 0 || guard.Behind() != 0 {
		t.Fatalf("the guard recorded a wait: last %d", guard.Last())
	}
	fc.OnSleep(nil)
	fc.Add(1001 * time.Millisecond)
	id, err := g.Next()
	if err != nil || ms(t, g, id) <= t0.UnixMilli()+1000 {
		t.Fatalf("after the wait: id %d (%v), want a timestamp above NotBefore", id, err)
	}
}

// TestNeverBelowFloor (issue 9 item 4): a node whose clock reads before the
// cluster's created_ms (a joiner 300 ms behind the creator) issues no ID
// below the floor; it waits, then serves at or above it.
func TestNeverBelowFloor(t *testing.T) {
	fc := clocktest.New(t0)
	created := t0.UnixMilli() + 300
	g, err := New(Config{Guard: clock.NewGuard(clock.GuardConfig{Clock: fc}, 0), CreatedMs: created})
	if err != nil {
		t.Fatal(err)
	}
	floor := g.Layout().Floor(created)
	if _, err := g.NextN(10); !errors.Is(err, ErrNotYet) {
		t.Fatalf("err = %v, want ErrNotYet while the clock is before created_ms", err)
	}
	fc.Add(300 * time.Millisecond)
	rs, err := g.NextN(5000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.First < floor {
			t.Fatalf("range %d..%d below the floor %d", r.First, r.Last, floor)
		}
	}
}

// TestRefusedForwardReadingDoesNotPoisonTheGuard (issue 9 item 7): the
// clock jumps +1h for less than a heartbeat; the ceiling refuses and nothing
// is issued. Once the clock is back, snowflake serves at once, the guard
// reports nothing behind, and LastUsed (the exact mark written at shutdown)
// is the last timestamp actually issued, not the refused reading.
func TestRefusedForwardReadingDoesNotPoisonTheGuard(t *testing.T) {
	fc := clocktest.New(t0)
	guard := clock.NewGuard(clock.GuardConfig{Clock: fc}, 0)
	asked := 0
	g, err := New(Config{Guard: guard, HighWater: t0.UnixMilli() + 5000, ExtendNow: func() { asked++ }})
	if err != nil {
		t.Fatal(err)
	}
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	issued := ms(t, g, id)
	fc.Add(time.Hour)
	_, err = g.Next()
	var je *JumpError
	if !errors.As(err, &je) || !errors.Is(err, ErrClockJump) || errors.Is(err, clock.ErrRollback) {
		t.Fatalf("err = %v, want a JumpError", err)
	}
	if asked != 1 {
		t.Fatalf("ExtendNow called %d times, want 1", asked)
	}
	if _, err := g.Next(); !errors.Is(err, ErrClockJump) || asked != 1 {
		t.Fatalf("second refusal: %v, ExtendNow %d times (want once per ceiling)", err, asked)
	}
	fc.Add(-time.Hour)
	if guard.Behind() != 0 || g.LastUsed() != issued {
		t.Fatalf("after the clock came back: behind %v, LastUsed %d want %d", guard.Behind(), g.LastUsed(), issued)
	}
	if _, err := g.Next(); err != nil {
		t.Fatalf("after the clock came back: %v, want an ID at once", err)
	}
}

// TestExtendNowNearTheCeiling: a reading within ExtendAhead of the ceiling
// asks for the next mark at once, and still serves.
func TestExtendNowNearTheCeiling(t *testing.T) {
	fc := clocktest.New(t0)
	asked := 0
	g, err := New(Config{Guard: clock.NewGuard(clock.GuardConfig{Clock: fc}, 0), HighWater: t0.UnixMilli() + 3000,
		ExtendNow: func() { asked++ }, ExtendAhead: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Next(); err != nil || asked != 0 {
		t.Fatalf("far from the ceiling: %v, asked %d", err, asked)
	}
	fc.Add(2500 * time.Millisecond)
	if _, err := g.Next(); err != nil || asked != 1 {
		t.Fatalf("near the ceiling: %v, asked %d, want served and asked once", err, asked)
	}
}

// TestStopWaitsForTheCallInProgress (issue 9 item 9): Stop takes the
// generator's lock, so a call already inside it finishes first, and the
// returned last-used millisecond covers every ID issued.
func TestStopWaitsForTheCallInProgress(t *testing.T) {
	fc := clocktest.New(t0)
	g, err := New(Config{Guard: clock.NewGuard(clock.GuardConfig{Clock: fc}, 0)})
	if err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fc.OnSleep(func(time.Duration) {
		once.Do(func() { close(inside) })
		<-release
	})
	type result struct {
		rs  []Range
		err error
	}
	done := make(chan result)
	go func() {
		rs, err := g.NextN(3 * (MaxSequence + 1)) // spans milliseconds: waits inside the lock
		done <- result{rs, err}
	}()
	<-inside
	stopped := make(chan int64)
	go func() { stopped <- g.Stop(errors.New("fenced")) }()
	close(release)
	r := <-done
	last := <-stopped
	if r.err != nil {
		t.Fatalf("call in progress: %v", r.err)
	}
	for _, rg := range r.rs {
		if ms(t, g, rg.Last) > last {
			t.Fatalf("issued ms %d above the exact mark %d returned by Stop", ms(t, g, rg.Last), last)
		}
	}
	fc.OnSleep(nil)
	if _, err := g.Next(); !errors.Is(err, ErrStopped) {
		t.Fatalf("after Stop: %v, want ErrStopped", err)
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"idc too big", Config{IDC: 4}},
		{"node too big", Config{Node: 256}},
		{"negative node", Config{Node: -1}},
		{"bits not 10", Config{Layout: Layout{IDCBits: 3, NodeBits: 8}}},
		{"epoch in future", Config{Layout: Layout{Epoch: time.Now().Add(48 * time.Hour)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestParseRoundTrip(t *testing.T) {
	l := Layout{IDCBits: 3, NodeBits: 7}.Normalize()
	id := l.Compose(t0.UnixMilli(), l.Worker(5, 100), 4095)
	p, err := l.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	want := Parts{ID: id, UnixMs: t0.UnixMilli(), Time: t0, IDC: 5, Node: 100, Worker: 5<<7 | 100, Sequence: 4095}
	if p != want {
		t.Fatalf("Parse = %+v, want %+v", p, want)
	}
	if _, err := l.Parse(-1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Parse(-1) err = %v", err)
	}
	if f := l.Floor(t0.UnixMilli()); f != l.Compose(t0.UnixMilli(), 0, 0) {
		t.Fatalf("Floor = %d", f)
	}
}

// TestConcurrentNoDuplicates: 16 goroutines x 100k IDs on the real clock.
func TestConcurrentNoDuplicates(t *testing.T) {
	const workers, per = 16, 100_000
	g, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int64, 0, per)
			for len(ids) < per {
				if w%2 == 0 {
					id, err := g.Next()
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, id)
					continue
				}
				rs, err := g.NextN(min(37, per-len(ids)))
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range rs {
					for id := r.First; id <= r.Last; id++ {
						ids = append(ids, id)
					}
				}
			}
			out[w] = ids
		}()
	}
	wg.Wait()
	seen := make(map[int64]struct{}, workers*per)
	for _, ids := range out {
		for i, id := range ids {
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("not increasing within one caller: %d after %d", id, ids[i-1])
			}
			if _, dup := seen[id]; dup {
				t.Fatalf("duplicate id %d", id)
			}
			seen[id] = struct{}{}
		}
	}
	if len(seen) != workers*per {
		t.Fatalf("got %d ids, want %d", len(seen), workers*per)
	}
}

func BenchmarkNext(b *testing.B) {
	g, _ := New(Config{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNextN(b *testing.B) {
	for _, n := range []int{1, 100, 4096} {
		b.Run("batch="+strconv.Itoa(n), func(b *testing.B) {
			g, _ := New(Config{})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.NextN(n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ids/s")
		})
	}
}

func BenchmarkNextParallel(b *testing.B) {
	g, _ := New(Config{})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := g.Next(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
