package main

import (
	"math"
	"math/bits"
	"time"
)

// histogram records latencies (nanoseconds) in log-linear buckets, the
// layout HdrHistogram uses: values below 2*histSub get one bucket each; every
// power of two is split into histSub equal buckets, so a recorded value is
// known to within 1/histSub (0.8 %) of itself, from 1 ns up to the largest
// int64, in a fixed 57 KiB array. Recording is an index computation and an
// increment, with no allocation.
//
// It is written here rather than taken from a library (HdrHistogram-go)
// because it is about 100 lines, the percentiles we report need nothing
// more, and idctl lives in the service's module, whose dependencies should
// not grow for a CLI subcommand.
//
// A histogram is not safe for concurrent use: each bench worker keeps its
// own and they are merged at the end.
type histogram struct {
	counts   []uint64
	n        uint64
	min, max int64
	sum      float64 // for the mean; float64 so it cannot overflow
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // buckets per power of two
	// histBuckets covers every non-negative int64: the largest value has
	// bit length 63, so e = 63-histSubBits-1 and index < (e+2)*histSub.
	histBuckets = (64 - histSubBits) * histSub
)

func newHistogram() *histogram {
	return &histogram{counts: make([]uint64, histBuckets), min: math.MaxInt64}
}

// bucketOf returns the bucket index of v (v >= 0).
func bucketOf(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - histSubBits - 1 // >= 1
	return e*histSub + int(v>>e)                 // v>>e is in [histSub, 2*histSub)
}

// bucketBounds returns the smallest and largest value of bucket i.
func bucketBounds(i int) (lo, hi int64) {
	if i < 2*histSub {
		return int64(i), int64(i)
	}
	e := i/histSub - 1
	m := int64(i - e*histSub)
	lo = m << e
	return lo, lo + (int64(1)<<e - 1)
}

// record adds one latency.
func (h *histogram) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// count returns how many values were recorded.
func (h *histogram) count() uint64 { return h.n }

// quantile returns the value at quantile q (0 < q <= 1): the upper bound of
// the bucket holding the ceil(q*n)-th smallest value, clamped to the
// recorded min and max, so it never understates a latency by more than the
// bucket width and max is exact. 0 when nothing was recorded.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		if seen >= rank {
			_, hi := bucketBounds(i)
			return time.Duration(min(max(hi, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// mean returns the arithmetic mean (0 when empty).
func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// minimum returns the smallest value recorded (0 when empty).
func (h *histogram) minimum() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// maximum returns the largest value recorded (0 when empty).
func (h *histogram) maximum() time.Duration { return time.Duration(h.max) }
