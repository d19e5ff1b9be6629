package checker

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Hole is a stretch of numbers of one ORDERED key that no answer holds,
// between two answered ranges of the key: numbers skipped (a cached
// reservation lost with its owner) or allocated to calls that failed.
type Hole struct {
	First, Last int64 // the numbers no call was answered
	// Prev and Next index the calls answered the numbers just below and
	// just above the hole.
	Prev, Next int
	// Failed is how many numbers the calls on the key that failed while
	// the hole could have been made had asked for: refusals overlapping
	// the time from Prev's start to Next's end, and calls without an
	// answer (that may have reached a node) sent before Next ended: a
	// node may serve a request long after its caller gave up (a paused
	// node resumes and works through its socket buffers). Explained:
	// Failed >= Size, so the hole may be numbers allocated to those
	// calls.
	Failed    int64
	Explained bool
}

// Size is the number of numbers in the hole.
func (h Hole) Size() int64 { return h.Last - h.First + 1 }

// KeyHoles is the hole analysis of one ORDERED key.
type KeyHoles struct {
	Biz, SubKey string
	Calls       int   // answered calls
	Answered    int64 // numbers answered
	First, Last int64 // lowest and highest number answered
	Holes       []Hole
}

// Missing returns the numbers in holes.
func (k *KeyHoles) Missing() int64 {
	var n int64
	for _, h := range k.Holes {
		n += h.Size()
	}
	return n
}

// Largest returns the largest hole (ok false: none).
func (k *KeyHoles) Largest() (Hole, bool) {
	var best Hole
	ok := false
	for _, h := range k.Holes {
		if !ok || h.Size() > best.Size() {
			best, ok = h, true
		}
	}
	return best, ok
}

// Unexplained returns the holes that the failed calls cannot account for.
func (k *KeyHoles) Unexplained() []Hole {
	var out []Hole
	for _, h := range k.Holes {
		if !h.Explained {
			out = append(out, h)
		}
	}
	return out
}

// mayHaveAllocated reports whether a failed call may have been given
// numbers it never received: a refusal (the owner may refuse after
// allocating) or a call without an answer, unless its connection was
// refused (nothing was sent).
func mayHaveAllocated(c *Call) bool {
	if c.OK() {
		return false
	}
	if c.Err != nil {
		return true
	}
	return c.Transport != "" && !strings.Contains(c.Transport, "connection refused")
}

// OrderedHoles returns the hole analysis of every ORDERED key of biz
// (every business when biz is ""), sorted by business and sub key. It
// looks at the answered ranges only: overlaps are the duplicates Check
// reports, and a hole is a stretch between the highest number answered so
// far and the next answered range. Holes below a key's first answer are
// not counted.
func OrderedHoles(calls []Call, biz string) []KeyHoles {
	type rg struct {
		first, last int64
		call        int
	}
	ranges := map[[2]string][]rg{}
	failed := map[[2]string][]int{}
	for i := range calls {
		c := &calls[i]
		if c.Channel != Ordered || (biz != "" && c.Biz != biz) {
			continue
		}
		k := [2]string{c.Biz, c.SubKey}
		if c.OK() {
			for _, r := range c.Ranges {
				ranges[k] = append(ranges[k], rg{r[0], r[1], i})
			}
		} else if mayHaveAllocated(c) {
			failed[k] = append(failed[k], i)
		}
	}
	keys := make([][2]string, 0, len(ranges))
	for k := range ranges {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	out := make([]KeyHoles, 0, len(keys))
	for _, k := range keys {
		rs := ranges[k]
		sort.Slice(rs, func(i, j int) bool { return rs[i].first < rs[j].first })
		kh := KeyHoles{Biz: k[0], SubKey: k[1], First: rs[0].first}
		seen := map[int]bool{}
		cur := rs[0]
		for i, r := range rs {
			kh.Answered += r.last - r.first + 1
			if !seen[r.call] {
				seen[r.call] = true
				kh.Calls++
			}
			if i > 0 && r.first > cur.last+1 {
				h := Hole{First: cur.last + 1, Last: r.first - 1, Prev: cur.call, Next: r.call}
				from, to := calls[h.Prev].Start, calls[h.Next].End
				for _, f := range failed[k] {
					if fc := &calls[f]; fc.Start.Before(to) && (fc.Err == nil || fc.End.After(from)) {
						h.Failed += int64(fc.Count)
					}
				}
				h.Explained = h.Failed >= h.Size()
				kh.Holes = append(kh.Holes, h)
			}
			if i == 0 || r.last > cur.last {
				cur = r
			}
		}
		kh.Last = cur.last
		out = append(out, kh)
	}
	return out
}

// HoleText describes a hole with the calls around it.
func HoleText(calls []Call, h Hole) string {
	return fmt.Sprintf("%d..%d (%d numbers; failed calls meanwhile asked for %d) between\n    %v %s\n    %v %s",
		h.First, h.Last, h.Size(), h.Failed, calls[h.Prev].Ranges, &calls[h.Prev], calls[h.Next].Ranges, &calls[h.Next])
}

// KeyOutage returns the longest time within [from, to] without a
// successful ORDERED answer on any of keys of biz (by answer time).
func KeyOutage(calls []Call, biz string, keys []string, from, to time.Time) Gap {
	in := map[string]bool{}
	for _, k := range keys {
		in[k] = true
	}
	var ends []time.Time
	for i := range calls {
		c := &calls[i]
		if c.OK() && c.Channel == Ordered && c.Biz == biz && in[c.SubKey] && !c.End.Before(from) && !c.End.After(to) {
			ends = append(ends, c.End)
		}
	}
	return LongestGap("ordered/"+biz, ends, from, to)
}
