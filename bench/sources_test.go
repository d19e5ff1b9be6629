package bench

import (
	"context"
	"testing"
)

// TestSources checks that every library under comparison hands out what
// the benchmarks count: n unique IDs per take, batch or loop.
func TestSources(t *testing.T) {
	for _, lib := range libraries {
		if lib.name == "sonyflake" {
			continue // 256 IDs per 10 ms: covered by sonyflake-1ms, same code
		}
		t.Run(lib.name, func(t *testing.T) {
			src := lib.open(t)
			for _, w := range workloads {
				n, err := src.take(w.n, w.batch)
				if err != nil || n < 1 || (src.batch == nil || !w.batch) && n != w.n {
					t.Fatalf("%s: take(%d) = %d, %v", w.name, w.n, n, err)
				}
			}
		})
	}
}

// TestUnorderedSetup checks the processor the UNORDERED benchmarks use
// hands out distinct numbers, with and without a pinned step.
func TestUnorderedSetup(t *testing.T) {
	for _, c := range []struct{ step, maxStep int64 }{{1, 1}, {1000, 0}} {
		u, biz := newUnordered(t, c.step, c.maxStep, 0)
		seen := map[int64]bool{}
		for range 200 {
			rs, err := u.Take(context.Background(), biz, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				for id := r.First; id <= r.Last; id++ {
					if seen[id] {
						t.Fatalf("step %d: %d handed out twice", c.step, id)
					}
					seen[id] = true
				}
			}
		}
		if len(seen) != 600 {
			t.Fatalf("step %d: %d IDs, want 600", c.step, len(seen))
		}
	}
}
