package perrequest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idgen/idgen/ordered/perrequest"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
)

// closingGate passes the first Check, then closes (the token changes) and
// runs onClose before returning: the gate closing right after a
// reservation's fence check, before the range is answered.
type closingGate struct {
	mu      sync.Mutex
	token   uint64
	open    bool
	checks  int
	onClose func()
}

func (g *closingGate) Enter() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		return 0, fmt.Errorf("%w: gate closed", segment.ErrUnavailable)
	}
	return g.token, nil
}

// ServerChanges implements segment.Gate: every close here is a server
// change.
func (g *closingGate) ServerChanges() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.token
}

func (g *closingGate) Check(tok uint64) error {
	g.mu.Lock()
	ok := g.open && g.token == tok
	g.checks++
	first := g.checks == 1
	if first {
		g.open = false
		g.token++
	}
	hook := g.onClose
	g.mu.Unlock()
	if first && hook != nil {
		hook()
	}
	if !ok {
		return fmt.Errorf("%w: gate closed", segment.ErrUnavailable)
	}
	return nil
}

// Issue 29 hole a, the per-request path: the gate closes right after a
// reservation's fence check passed, and the barrier reads Remembered then.
// Before the fix the range was remembered only after that and still
// answered: a number the barrier did not raise on the new server. Now the
// range is remembered first and the gate checked again: refused (a gap).
func TestOrderedRangeAnsweredOnlyIfRemembered(t *testing.T) {
	s := memstore.New()
	biz := mustCreate(t, s, segment.Biz{Name: "ord", Channel: segment.ChannelOrdered, StartNum: 1})
	g := &closingGate{token: 1, open: true}
	o := newOrdered(t, perrequest.Config{Store: s, Gate: g})
	flushed := map[string]int64{}
	g.onClose = func() {
		o.Remembered(func(_, sub string, last int64) { flushed[sub] = last })
	}
	r, err := o.Take(context.Background(), biz, "k", 3, segment.RequestID{})
	if err == nil {
		if flushed["k"] < r.Last {
			t.Fatalf("answered %v after the gate closed; the barrier raised only to %d", r, flushed["k"])
		}
		return
	}
	if !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("refusal %v is not retryable", err)
	}
}
