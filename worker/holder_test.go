package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/clock"
)

// issuedLog records every (worker, millisecond) issued by any test holder,
// so that tests can assert no timestamp of a worker is issued twice across
// leases, fences and re-claims.
type issuedLog struct {
	mu   sync.Mutex
	seen map[[2]int64]string // (worker, ms) -> holder name
	dups []string
}

func newIssuedLog() *issuedLog { return &issuedLog{seen: map[[2]int64]string{}} }

func (l *issuedLog) add(name string, worker int, ms int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := [2]int64{int64(worker), ms}
	if prev, ok := l.seen[k]; ok {
		l.dups = append(l.dups, fmt.Sprintf("worker %d ms %d issued by %s and %s", worker, ms, prev, name))
		return
	}
	l.seen[k] = name
}

// maxBy returns the highest millisecond name issued on worker.
func (l *issuedLog) maxBy(name string, worker int) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m int64
	for k, who := range l.seen {
		if who == name && k[0] == int64(worker) {
			m = max(m, k[1])
		}
	}
	return m
}

func (l *issuedLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.dups) > 0 {
		t.Fatalf("%d duplicate timestamps, first: %s", len(l.dups), l.dups[0])
	}
}

// testHolder is a Holder that behaves like the snowflake side: it issues
// one ID per millisecond within (NotBefore, HighWater] while acquired. It
// deliberately forgets what it issued when a slot is acquired again, so
// that only the lease's NotBefore keeps a re-claim from reissuing.
type testHolder struct {
	name string
	clk  clock.Clock
	log  *issuedLog

	mu       sync.Mutex
	active   bool
	slot     Slot
	hw       int64
	floor    int64
	lastUsed int64
	acquired []Slot
	extended []int64
	fenced   []error
	issued   int
	problems []string
	changed  chan struct{}
}

var _ Holder = (*testHolder)(nil)

func newTestHolder(name string, clk clock.Clock, log *issuedLog) *testHolder {
	if clk == nil {
		clk = clock.System{}
	}
	if log == nil {
		log = newIssuedLog()
	}
	return &testHolder{name: name, clk: clk, log: log, changed: make(chan struct{}, 1)}
}

func (h *testHolder) notify() {
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *testHolder) Acquired(s Slot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// NotBefore may be ahead of the clock: the holder issues nothing until
	// the clock passes it (issue checks h.floor).
	if s.HighWater <= s.NotBefore {
		h.problems = append(h.problems, fmt.Sprintf("Acquired with HighWater %d <= NotBefore %d", s.HighWater, s.NotBefore))
	}
	if h.active {
		h.problems = append(h.problems, "Acquired while already active")
	}
	h.active, h.slot, h.hw, h.floor = true, s, s.HighWater, s.NotBefore
	h.acquired = append(h.acquired, s)
	h.notify()
}

func (h *testHolder) Extended(hw int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.extended = append(h.extended, hw)
	if hw > h.hw {
		h.hw = hw
	}
	h.notify()
}

func (h *testHolder) Fenced(reason error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.active = false
	h.fenced = append(h.fenced, reason)
	h.notify()
}

func (h *testHolder) LastUsed() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastUsed
}

// issue issues one timestamp if allowed now.
func (h *testHolder) issue() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := clock.Millis(h.clk)
	if !h.active || now <= h.floor || now > h.hw {
		return false
	}
	h.floor = now
	h.lastUsed = max(h.lastUsed, now)
	h.issued++
	h.log.add(h.name, h.slot.Worker, now)
	return true
}

// issueLoop issues as fast as the clock allows until ctx ends.
func (h *testHolder) issueLoop(ctx context.Context) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.issue()
		}
	}
}

type holderSnap struct {
	active   bool
	slot     Slot
	hw       int64
	lastUsed int64
	acquired []Slot
	extended []int64
	fenced   []error
	issued   int
	problems []string
}

func (h *testHolder) snap() holderSnap {
	h.mu.Lock()
	defer h.mu.Unlock()
	return holderSnap{
		active: h.active, slot: h.slot, hw: h.hw, lastUsed: h.lastUsed,
		acquired: append([]Slot(nil), h.acquired...), extended: append([]int64(nil), h.extended...),
		fenced: append([]error(nil), h.fenced...), issued: h.issued, problems: append([]string(nil), h.problems...),
	}
}

// waitFor polls cond until it holds or the generous deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *testHolder) checkNoProblems(t *testing.T) {
	t.Helper()
	if p := h.snap().problems; len(p) > 0 {
		t.Fatalf("holder %s saw contract violations: %v", h.name, p)
	}
}
