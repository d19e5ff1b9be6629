package segment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
)

// memLedger is segment.Ledger in memory, with zkguard's rule: a segment
// overlapping one claimed before is refused with the highest end.
type memLedger struct {
	mu     sync.Mutex
	ranges map[string][]segment.Range
}

func (l *memLedger) Claim(_ context.Context, biz string, r segment.Range) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var high int64
	hit := false
	for _, x := range l.ranges[biz] {
		high = max(high, x.Last)
		hit = hit || (x.First <= r.Last && r.First <= x.Last)
	}
	if hit {
		return high, fmt.Errorf("overlap: %w", segment.ErrRegressed)
	}
	l.ranges[biz] = append(l.ranges[biz], r)
	return 0, nil
}

// TestUnorderedLedgerAcrossNodes is issue #18's hole 2 for UNORDERED: after
// the store went back (a lossy failover), another node reserves a segment
// the first node already served. Its own guard never saw it; the ledger
// refuses it, the store is raised above the ledger and the node serves a
// fresh segment. Without the ledger the same run serves duplicates.
func TestUnorderedLedgerAcrossNodes(t *testing.T) {
	for _, withLedger := range []bool{true, false} {
		t.Run(fmt.Sprintf("ledger=%v", withLedger), func(t *testing.T) {
			ms := memstore.New()
			biz := mustCreate(t, ms, segment.Biz{Name: "u", Step: 100})
			var ledger segment.Ledger
			if withLedger {
				ledger = &memLedger{ranges: map[string][]segment.Range{}}
			}
			nodeA := newUnordered(t, segment.UnorderedConfig{Store: ms, Ledger: ledger})
			nodeB := newUnordered(t, segment.UnorderedConfig{Store: ms, Ledger: ledger})
			ctx := context.Background()
			served := map[int64]string{}
			take := func(name string, u *segment.Unordered, n int64) int {
				dups := 0
				rs, err := u.Take(ctx, biz, n)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, r := range rs {
					for id := r.First; id <= r.Last; id++ {
						if served[id] != "" {
							dups++
						}
						served[id] = name
					}
				}
				return dups
			}
			take("A", nodeA, 50)                             // A reserves 1..100 (and prefetches 101..200)
			if err := ms.SetMaxID(biz.Name, 0); err != nil { // failover: everything lost
				t.Fatal(err)
			}
			dups := take("B", nodeB, 100)
			if withLedger && dups != 0 {
				t.Fatalf("B served %d numbers A had served", dups)
			}
			if !withLedger && dups == 0 {
				t.Fatal("control: without the ledger B should repeat A's numbers (the test does not reproduce the failover)")
			}
			if withLedger {
				if st := nodeB.Stats(); len(st) != 1 || st[0].Regressions == 0 {
					t.Errorf("B's stats %+v: want the refused segment counted", st)
				}
			}
		})
	}
}
