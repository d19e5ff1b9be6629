package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// afterClaimProbe records, at each AfterClaim call, whether the claim and
// its mark were in ZooKeeper and whether the holder had the slot yet; it
// fails the first fail calls.
type afterClaimProbe struct {
	f *fakeZK
	h *testHolder

	mu    sync.Mutex
	fail  int
	calls []afterClaimCall
}

type afterClaimCall struct {
	claimed, marked bool // slots/<n> and last/<n> exist for some n held now
	acquired        int  // Holder.Acquired calls before this one
}

func (p *afterClaimProbe) hook(ctx context.Context) error {
	l := layout{root: "/t", cluster: "c1"}
	call := afterClaimCall{acquired: len(p.h.snap().acquired)}
	for _, n := range lockedChildren(p.f, l.slots(0)) {
		if _, _, ok := p.f.get(l.slots(0) + "/" + n); ok {
			call.claimed = true
			if _, _, ok := p.f.get(l.lastDir(0) + "/" + n); ok {
				call.marked = true
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, call)
	if p.fail > 0 {
		p.fail--
		return errors.New("probe: touch failed")
	}
	return nil
}

// lockedChildren is fakeZK.childrenOf (the server's tree under its lock).
func lockedChildren(f *fakeZK, p string) []string { return f.childrenOf(p) }

func (p *afterClaimProbe) snap() []afterClaimCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]afterClaimCall(nil), p.calls...)
}

// AfterClaim (the server's incarnation touch, issue 29 hole h) runs after
// the claim and its mark are written and before the holder serves, at
// start and at the re-claim after an expiry; a failed one keeps the slot
// from serving and the claim is made again.
func TestAfterClaimRunsBeforeTheSlotServes(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	p := &afterClaimProbe{f: f, h: h, fail: 1}
	cfg := fakeConfig(t, f, h, 9000)
	cfg.AfterClaim = p.hook
	l := register(t, cfg)

	calls := p.snap()
	if len(calls) != 2 {
		t.Fatalf("AfterClaim ran %d times at start, want 2 (the first failed, the claim was made again)", len(calls))
	}
	for i, c := range calls {
		if !c.claimed || !c.marked || c.acquired != 0 {
			t.Fatalf("start call %d: %+v; want the claim and mark written and the slot not yet acquired", i, c)
		}
	}
	if n := len(h.snap().acquired); n != 1 {
		t.Fatalf("acquired %d times, want 1 (the claim whose AfterClaim failed must not serve)", n)
	}
	// The failed claim was released: this lease holds exactly one slot.
	if held := lockedChildren(f, layout{root: "/t", cluster: "c1"}.slots(0)); len(held) != 1 {
		t.Fatalf("slots held after the start: %v, want one", held)
	}

	// Re-claim after the session expired: a failed AfterClaim delays the
	// slot; the next attempt serves.
	p.mu.Lock()
	p.fail = 1
	p.mu.Unlock()
	connOf(l).Renew(false)
	waitFor(t, "re-claim", 10*time.Second, func() bool { return len(h.snap().acquired) == 2 })
	calls = p.snap()
	if len(calls) < 4 {
		t.Fatalf("AfterClaim ran %d times, want 2 more at the re-claim (one failed)", len(calls))
	}
	for i, c := range calls[2:] {
		if !c.claimed || !c.marked || c.acquired != 1 {
			t.Fatalf("re-claim call %d: %+v; want the claim and mark written and the slot not yet acquired again", i, c)
		}
	}
	h.checkNoProblems(t)
}

// A start whose AfterClaim keeps failing is refused (no slot serves),
// after startClaimAttempts claims, each released.
func TestAfterClaimFailingRefusesTheStart(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	p := &afterClaimProbe{f: f, h: h, fail: 100}
	cfg := fakeConfig(t, f, h, 9000)
	cfg.AfterClaim = p.hook
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Register(ctx, cfg)
	if err == nil {
		_ = l.Close(context.Background())
		t.Fatal("Register succeeded although AfterClaim failed every time")
	}
	if !errors.Is(err, ErrAfterClaim) {
		t.Fatalf("Register: %v, want ErrAfterClaim", err)
	}
	if n := len(p.snap()); n != startClaimAttempts {
		t.Fatalf("AfterClaim ran %d times, want %d", n, startClaimAttempts)
	}
	if n := len(h.snap().acquired); n != 0 {
		t.Fatalf("acquired %d times, want none", n)
	}
	if held := lockedChildren(f, layout{root: "/t", cluster: "c1"}.slots(0)); len(held) != 0 {
		t.Fatalf("slots still claimed after the refused start: %v", held)
	}
}
