package scenario

import (
	"fmt"
	"testing"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/segment"
)

// TestJavaShard: the suite's own shard function agrees with the service's
// (the hot keys must all be in the shard the scenario faults).
func TestJavaShard(t *testing.T) {
	keys := []string{"", "a", "k0", "hot1", "order:4711", "日本語", "emoji 😀 key", "polygenelubricants"}
	for i := range 2000 {
		keys = append(keys, fmt.Sprintf("cold%d", i), fmt.Sprintf("hot%d", i))
	}
	for _, k := range keys {
		if got, want := javaShard(k), segment.Shard(k); got != want {
			t.Errorf("javaShard(%q) = %d, segment.Shard = %d", k, got, want)
		}
	}
	// "polygenelubricants".hashCode() is Integer.MIN_VALUE: shard 0.
	if got := javaShard("polygenelubricants"); got != 0 {
		t.Errorf("javaShard(MIN_VALUE key) = %d, want 0", got)
	}
	for s := range 64 {
		ks := keysInShard(s, "hot", 3)
		if len(ks) != 3 {
			t.Fatalf("shard %d: %v", s, ks)
		}
		for _, k := range ks {
			if segment.Shard(k) != s {
				t.Errorf("keysInShard(%d) gave %q of shard %d", s, k, segment.Shard(k))
			}
		}
	}
}

// TestOrderedGaps: the figures ordered-zk-outage and
// ordered-owner-zk-partition bound and print. The hot keys' gap is the
// longest time without an answer on any hot key from any caller; a caller
// that stops answering (the cut-off node's own callers) shows as the worst
// single caller, not as a hot-key gap; refusals and cold keys count only
// where they should.
func TestOrderedGaps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := &ordSetup{hot: []string{"h1", "h2"}, cold: []string{"c1"}}
	call := func(caller, key string, end int, ok bool) checker.Call {
		c := checker.Call{Caller: caller, Biz: bizCached, SubKey: key, Channel: checker.Ordered, Start: at(end - 5), End: at(end)}
		if ok {
			c.Ranges = [][2]int64{{1, 1}}
		} else {
			c.Err = &checker.Refusal{Code: 5}
		}
		return c
	}
	calls := []checker.Call{
		call("n0/oc/hot0", "h1", 100, true),
		call("n0/oc/hot0", "h1", 900, true),   // n0's h1 caller: 800 ms gap
		call("n1/oc/hot1", "h2", 200, true),   // n1's h2 caller: answers then only refusals
		call("n1/oc/hot1", "h2", 1500, false), // a refusal is no answer
		call("n2/oc/hot1", "h2", 500, true),
		call("n2/oc/hot1", "h2", 1100, true),
		call("n0/oc/cold", "c1", 1300, true),
		call("n0/og/hot0", "h1", 1350, true), // another business
	}
	calls[len(calls)-1].Biz = bizGapless
	f := s.orderedGaps(calls, bizCached, at(0), at(2000))
	// Answers on hot keys at 100, 200, 500, 900, 1100: the longest gap is
	// 1100 -> 2000.
	if f.hot.Len != 900*time.Millisecond || !f.hot.From.Equal(at(1100)) {
		t.Errorf("hot keys' gap %v from %v, want 900ms from 1100", f.hot.Len, f.hot.From)
	}
	// The cold key's answer at 1300 shortens the any-key gap to 700 ms.
	if f.any.Len != 700*time.Millisecond {
		t.Errorf("any key's gap %v, want 700ms", f.any.Len)
	}
	// n1's h2 caller answered last at 200: 1800 ms.
	if f.worstWho != "n1/oc/hot1" || f.worst.Len != 1800*time.Millisecond {
		t.Errorf("worst caller %s %v, want n1/oc/hot1 1.8s", f.worstWho, f.worst.Len)
	}
	// A window that starts after the last answer is all gap.
	if f := s.orderedGaps(calls, bizCached, at(1200), at(1400)); f.hot.Len != 200*time.Millisecond {
		t.Errorf("late window: hot keys' gap %v, want 200ms", f.hot.Len)
	}
}
