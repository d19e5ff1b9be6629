package main

import (
	"math"
	"slices"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// idRange is an inclusive range of IDs.
type idRange struct{ first, last int64 }

// idSink keeps every ID one bench worker received, compactly: a run of
// consecutive IDs (a batch, or single IDs that happen to follow each other)
// is one range of 16 bytes, any other ID 8 bytes. Ten million single IDs
// from snowflake take 80 MB; UNORDERED and ORDERED batches take almost
// nothing. Not safe for concurrent use: one sink per worker.
type idSink struct {
	singles []int64
	ranges  []idRange
	// lastRange says whether the most recent add went to ranges (true) or
	// singles (false), so the next add can extend it.
	lastRange bool
	n         int64
}

// add records the IDs first..last (first <= last).
func (s *idSink) add(first, last int64) {
	if last < first {
		return
	}
	s.n += last - first + 1
	switch {
	case s.lastRange && len(s.ranges) > 0 && s.ranges[len(s.ranges)-1].last != math.MaxInt64 &&
		s.ranges[len(s.ranges)-1].last+1 == first:
		s.ranges[len(s.ranges)-1].last = last
		return
	case !s.lastRange && len(s.singles) > 0 && s.singles[len(s.singles)-1] != math.MaxInt64 &&
		s.singles[len(s.singles)-1]+1 == first:
		prev := s.singles[len(s.singles)-1]
		s.singles = s.singles[:len(s.singles)-1]
		s.ranges = append(s.ranges, idRange{prev, last})
		s.lastRange = true
		return
	}
	if first == last {
		s.singles = append(s.singles, first)
		s.lastRange = false
		return
	}
	s.ranges = append(s.ranges, idRange{first, last})
	s.lastRange = true
}

// count returns how many IDs were added.
func (s *idSink) count() int64 { return s.n }

// dupResult is what findDuplicates found.
type dupResult struct {
	Checked    int64   `json:"ids_checked"`
	Duplicates int64   `json:"duplicates"`         // extra occurrences: an ID seen 3 times counts 2
	Examples   []int64 `json:"examples,omitempty"` // a few duplicated IDs, each once
}

// findDuplicates sorts every sink in place and merges them (a k-way merge
// over sorted streams, no copy of the IDs) to count IDs received more than
// once, keeping up to maxExamples of them.
func findDuplicates(sinks []*idSink, maxExamples int) dupResult {
	var res dupResult
	h := make(mergeHeap, 0, 2*len(sinks))
	for _, s := range sinks {
		if s == nil {
			continue
		}
		res.Checked += s.n
		slices.Sort(s.singles)
		slices.SortFunc(s.ranges, func(a, b idRange) int {
			switch {
			case a.first < b.first:
				return -1
			case a.first > b.first:
				return 1
			}
			return 0
		})
		if len(s.singles) > 0 {
			h = append(h, &stream{singles: s.singles})
		}
		if len(s.ranges) > 0 {
			h = append(h, &stream{ranges: s.ranges})
		}
	}
	h.init()
	started := false
	var hi int64 // the largest ID seen so far
	for len(h) > 0 {
		r := h[0].head()
		if h[0].advance() {
			h.fix0()
		} else {
			h.pop0()
		}
		if started && r.first <= hi {
			end := min(r.last, hi)
			res.Duplicates += end - r.first + 1
			for k := int64(0); k <= end-r.first && len(res.Examples) < maxExamples; k++ {
				id := r.first + k // (no id++ loop: end may be MaxInt64)
				if n := len(res.Examples); n == 0 || res.Examples[n-1] != id {
					res.Examples = append(res.Examples, id)
				}
			}
		}
		if !started || r.last > hi {
			hi = r.last
		}
		started = true
	}
	return res
}

// findDuplicatesPerKey runs findDuplicates once per key over every
// worker's sink for that key (sinks[worker][key]) and adds the results up:
// the same number under two keys is not a duplicate.
func findDuplicatesPerKey(sinks [][]*idSink, maxExamples int) dupResult {
	var res dupResult
	keys := 0
	for _, ws := range sinks {
		keys = max(keys, len(ws))
	}
	col := make([]*idSink, len(sinks))
	for k := 0; k < keys; k++ {
		for w, ws := range sinks {
			col[w] = nil
			if k < len(ws) {
				col[w] = ws[k]
			}
		}
		r := findDuplicates(col, maxExamples-len(res.Examples))
		res.Checked += r.Checked
		res.Duplicates += r.Duplicates
		res.Examples = append(res.Examples, r.Examples...)
	}
	return res
}

// stream is a cursor over one sorted slice of singles or ranges.
type stream struct {
	singles []int64
	ranges  []idRange
	i       int
}

func (s *stream) head() idRange {
	if s.singles != nil {
		v := s.singles[s.i]
		return idRange{v, v}
	}
	return s.ranges[s.i]
}

// advance moves to the next element; false when the stream is done.
func (s *stream) advance() bool {
	s.i++
	if s.singles != nil {
		return s.i < len(s.singles)
	}
	return s.i < len(s.ranges)
}

// mergeHeap is a min-heap of streams by their head's first ID, written out
// rather than through container/heap to keep interface calls off a loop
// that runs once per received ID.
type mergeHeap []*stream

func (h mergeHeap) less(i, j int) bool { return h[i].head().first < h[j].head().first }

func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h mergeHeap) fix0() { h.down(0) }

func (h *mergeHeap) pop0() {
	old := *h
	n := len(old) - 1
	old[0] = old[n]
	old[n] = nil
	*h = old[:n]
	if n > 0 {
		h.down(0)
	}
}

func (h mergeHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// strictOrder reports whether ch promises strictly increasing numbers per
// sub key: ORDERED, and SLOW_ORDERED (the older Java service's name for
// it, served exactly as ORDERED). nil (the business's default) does not:
// the bench cannot tell which channel that is.
func strictOrder(ch *idl.Channel) bool {
	return ch != nil && (*ch == idl.Channel_ORDERED || *ch == idl.Channel_SLOW_ORDERED)
}

// orderCheck verifies that one caller's IDs for each key are strictly
// increasing across its requests (the ORDERED and SLOW_ORDERED guarantee
// seen from a caller that waits for each answer before the next request).
type orderCheck struct {
	last       []int64
	seen       []bool
	violations int64
}

func newOrderCheck(keys int) *orderCheck {
	return &orderCheck{last: make([]int64, keys), seen: make([]bool, keys)}
}

// observe checks the ranges of one response for key k, in order.
func (o *orderCheck) observe(k int, ranges []idRange) {
	for _, r := range ranges {
		if r.last < r.first || o.seen[k] && r.first <= o.last[k] {
			o.violations++
		}
		if !o.seen[k] || r.last > o.last[k] {
			o.last[k] = r.last
		}
		o.seen[k] = true
	}
}
