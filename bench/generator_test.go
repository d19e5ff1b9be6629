package bench

import (
	"testing"
	"time"

	bwsnowflake "github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake/v2"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/snowflake"
)

// workloads are the calls compared across libraries: one ID per call, and
// batches of 1, 100 and 4096 (4096 = one full millisecond of sequence). A
// library without a batch call runs a batch as a loop of n single calls.
var workloads = []struct {
	name  string
	n     int
	batch bool // false: the library's single-ID call
}{
	{"single", 1, false},
	{"batch-1", 1, true},
	{"batch-100", 100, true},
	{"batch-4096", 4096, true},
}

// idSource is one generator under test.
type idSource struct {
	single func() error // the library's one-ID call
	// batch hands out n IDs in one call and returns how many; nil when the
	// library has no batch call, and a batch is then a loop of n singles.
	batch func(n int) (int, error)
}

// libraries compared, each opened fresh for every sub-benchmark so no state
// (such as a used-up millisecond) carries from one to the next.
var libraries = []struct {
	name string
	open func(tb testing.TB) idSource
}{
	{"idgen", func(tb testing.TB) idSource {
		g, err := snowflake.New(snowflake.Config{})
		if err != nil {
			tb.Fatal(err)
		}
		return idSource{
			single: func() error { _, err := g.Next(); return err },
			batch: func(n int) (int, error) {
				rs, err := g.NextN(n)
				got := 0
				for _, r := range rs {
					got += int(r.Last - r.First + 1)
				}
				return got, err
			},
		}
	}},
	{"bwmarrin", func(tb testing.TB) idSource {
		node, err := bwsnowflake.NewNode(1) // default layout: 41 ms + 10 node + 12 step, as idgen's
		if err != nil {
			tb.Fatal(err)
		}
		return idSource{single: func() error { node.Generate(); return nil }}
	}},
	// sonyflake's defaults (10 ms ticks, 8-bit sequence) cap it at 25,600
	// IDs/s by design.
	{"sonyflake", func(tb testing.TB) idSource {
		return sonySource(tb, sonyflake.Settings{})
	}},
	// sonyflake-1ms gives sonyflake idgen's layout (1 ms ticks, 12-bit
	// sequence, 10-bit machine) to compare implementations, not layouts.
	{"sonyflake-1ms", func(tb testing.TB) idSource {
		return sonySource(tb, sonyflake.Settings{TimeUnit: time.Millisecond, BitsSequence: 12, BitsMachineID: 10})
	}},
}

func sonySource(tb testing.TB, st sonyflake.Settings) idSource {
	// The default machine ID reads a private IPv4 address, which a
	// container may not have.
	st.MachineID = func() (int, error) { return 1, nil }
	sf, err := sonyflake.New(st)
	if err != nil {
		tb.Fatal(err)
	}
	return idSource{single: func() error { _, err := sf.NextID(); return err }}
}

// take hands out n IDs with the batch call, or a loop of singles.
func (s idSource) take(n int, useBatch bool) (int, error) {
	if useBatch && s.batch != nil {
		return s.batch(n)
	}
	for i := 0; i < n; i++ {
		if err := s.single(); err != nil {
			return i, err
		}
	}
	return n, nil
}

// BenchmarkGenerator runs every workload against every library on one
// goroutine. ids/s is the figure to compare; the cap of the 41+10+12 layout
// is 4,096,000 IDs/s per worker.
func BenchmarkGenerator(b *testing.B) {
	for _, lib := range libraries {
		for _, w := range workloads {
			b.Run(lib.name+"/"+w.name, func(b *testing.B) {
				src := lib.open(b)
				ids := 0
				for b.Loop() {
					n, err := src.take(w.n, w.batch)
					if err != nil {
						b.Fatal(err)
					}
					ids += n
				}
				reportIDs(b, ids)
			})
		}
	}
}

// BenchmarkGeneratorParallel hands out single IDs from GOMAXPROCS
// goroutines sharing one generator (the server's situation).
func BenchmarkGeneratorParallel(b *testing.B) {
	for _, lib := range libraries {
		b.Run(lib.name, func(b *testing.B) {
			src := lib.open(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := src.single(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportIDs(b, b.N)
		})
	}
}

// reportIDs adds ids/s and ns/id to the benchmark line.
func reportIDs(b *testing.B, ids int) {
	b.Helper()
	if s := b.Elapsed().Seconds(); s > 0 && ids > 0 {
		b.ReportMetric(float64(ids)/s, "ids/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ids), "ns/id")
	}
}

// BenchmarkBatchCost is the cost of one idgen call when the current
// millisecond is fresh, which is what a batch costs a server that is not
// at the 4096-per-millisecond cap. In a tight loop (BenchmarkGenerator) a
// batch of 4096 can never be cheaper than the millisecond it fills, so here
// the generator reads a hand-driven clock moved on by 1 ms before every
// call: no call waits for the clock. The target: a batch of 4096 costs
// about as much as one ID. (The other libraries cannot take a clock; their
// batch is n single calls, whose cost BenchmarkGenerator shows as ns/id.)
func BenchmarkBatchCost(b *testing.B) {
	for _, w := range workloads {
		b.Run("idgen/"+w.name, func(b *testing.B) {
			fake := clocktest.New(time.Now())
			g, err := snowflake.New(snowflake.Config{Guard: clock.NewGuard(clock.GuardConfig{Clock: fake}, 0)})
			if err != nil {
				b.Fatal(err)
			}
			src := idSource{
				single: func() error { _, err := g.Next(); return err },
				batch: func(n int) (int, error) {
					rs, err := g.NextN(n)
					return len(rs), err
				},
			}
			for b.Loop() {
				fake.Add(time.Millisecond)
				if _, err := src.take(w.n, w.batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
