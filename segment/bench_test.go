package segment_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
)

// BenchmarkUnorderedTake measures the hot path: parallel Takes of one
// business served from the double buffer on memstore. ns/op is per
// request; IDs/s is reported separately.
func BenchmarkUnorderedTake(b *testing.B) {
	for _, batch := range []int64{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ms := memstore.New()
			biz := mustCreate(b, ms, segment.Biz{Name: "bench", Step: 100_000})
			u := newUnordered(b, segment.UnorderedConfig{Store: ms})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := u.Take(ctx, biz, batch); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)*float64(batch)/b.Elapsed().Seconds(), "IDs/s")
		})
	}
}
