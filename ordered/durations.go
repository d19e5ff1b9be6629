package ordered

import (
	"sync/atomic"
	"time"
)

// persistBucketCount is len(PersistBuckets).
const persistBucketCount = 14

// PersistBuckets are the upper bounds, in seconds, of the persist-duration
// histogram in Stats.PersistDurations: 0.5 ms doubling to about 4 s (a
// store call is bounded by Config.Timeout, default 2s). Do not modify.
var PersistBuckets = func() []float64 {
	b := make([]float64, persistBucketCount)
	for i, v := 0, 0.0005; i < len(b); i, v = i+1, v*2 {
		b[i] = v
	}
	return b
}()

// Histogram is a snapshot of a duration histogram, in the shape a
// Prometheus constant histogram takes: Counts[i] observations at or below
// Bounds[i] (cumulative), Count observations in all, Sum their seconds.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// durations is a lock-free histogram over PersistBuckets. A snapshot taken
// while observations land may have Sum lag Count by the observations in
// flight; Count is the sum of the buckets, so the buckets never exceed it.
type durations struct {
	buckets [persistBucketCount + 1]atomic.Uint64 // the last: above every bound
	nanos   atomic.Uint64
}

func (h *durations) observe(d time.Duration) {
	d = max(d, 0)
	s := d.Seconds()
	i := 0
	for i < len(PersistBuckets) && s > PersistBuckets[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.nanos.Add(uint64(d))
}

func (h *durations) snapshot() Histogram {
	out := Histogram{Bounds: PersistBuckets, Counts: make([]uint64, len(PersistBuckets))}
	for i := range h.buckets {
		out.Count += h.buckets[i].Load()
		if i < len(out.Counts) {
			out.Counts[i] = out.Count
		}
	}
	out.Sum = float64(h.nanos.Load()) / 1e9
	return out
}
