package zkown

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idgen/idgen/ordered"
)

// observed is a coordinator option that sends its log, from debug up, to
// an observer the test reads.
func observed() (func(*Config), *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return func(c *Config) { c.Logger = zap.New(core) }, logs
}

// infoTaken returns the fields of the "ORDERED shards taken" summaries
// logged since mark (an index into logs.All()).
func infoTaken(t *testing.T, logs *observer.ObservedLogs, mark int) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range logs.All()[mark:] {
		if e.Message == "ORDERED shards taken" {
			if e.Level != zapcore.InfoLevel {
				t.Fatalf("summary at %v, want info", e.Level)
			}
			out = append(out, e.ContextMap())
		}
	}
	return out
}

// ints is a zap.Ints field as the observer keeps it.
func ints(v any) []int {
	var out []int
	for _, x := range v.([]any) {
		out = append(out, x.(int))
	}
	return out
}

// noPerShardInfo fails on a per-shard ownership line above debug.
func noPerShardInfo(t *testing.T, logs *observer.ObservedLogs) {
	t.Helper()
	for _, e := range logs.All() {
		switch e.Message {
		case "ORDERED shard taken", "ORDERED shard handed off to its desired owner":
			if e.Level != zapcore.DebugLevel {
				t.Fatalf("per-shard line %q at %v, want debug", e.Message, e.Level)
			}
		}
	}
}

// flushed steps the nodes through one quiet lease (the summaries of the
// bursts before are logged).
func flushed(w *world, nodes ...*tnode) {
	for range testLease/testTick + 1 {
		w.stepAll(testTick, nodes...)
	}
}

// The first node of a cluster claims the 64 shards in one round,
// claimParallel at once (issue 32: 128 lines at every start). Once a lease
// passed without a change, one line counts every claim, however the
// goroutines interleaved; the per-shard lines are at debug.
func TestSummaryCountsConcurrentClaims(t *testing.T) {
	w := newWorld(t)
	opt, logs := observed()
	a := w.node(addrA, opt)
	a.step()
	w.stepAll(testTick, a)
	if n := len(infoTaken(t, logs, 0)); n != 0 {
		t.Fatalf("%d summaries before a quiet lease, want 0 (the burst may go on)", n)
	}
	flushed(w, a)
	sums := infoTaken(t, logs, 0)
	if len(sums) != 1 {
		t.Fatalf("%d summaries, want 1: %v", len(sums), sums)
	}
	s := sums[0]
	want := make([]int, Shards)
	for i := range want {
		want[i] = i
	}
	if s["count"] != int64(Shards) || !slices.Equal(ints(s["shards"]), want) || s["failed"] != int64(0) {
		t.Fatalf("summary %v, want count %d, shards 0..%d, failed 0", s, Shards, Shards-1)
	}
	if why := s["why"].(map[string]int); len(why) != 1 || why["released"] != Shards {
		t.Fatalf("why %v, want released: %d", why, Shards)
	}
	if n := logs.FilterMessage("ORDERED shard taken").Len(); n != Shards {
		t.Fatalf("%d per-shard lines at debug, want %d", n, Shards)
	}
	noPerShardInfo(t, logs)
}

// Claims that fail are counted apart: the summary's count is the shards
// the handler accepted, failed the others (each warned about).
func TestSummaryCountsFailedClaims(t *testing.T) {
	w := newWorld(t)
	opt, logs := observed()
	a := w.node(addrA, opt)
	a.h.acquireErr = func(g ordered.Grant) error {
		if g.Shard%4 == 0 {
			return errors.New("store down")
		}
		return nil
	}
	a.step()
	a.h.acquireErr = func(ordered.Grant) error { return errors.New("store down") }
	a.c.Close(context.Background()) // Close logs what is pending
	sums := infoTaken(t, logs, 0)
	if len(sums) != 1 || sums[0]["count"] != int64(Shards*3/4) || sums[0]["failed"] != int64(Shards/4) {
		t.Fatalf("summaries %v, want one with count %d, failed %d", sums, Shards*3/4, Shards/4)
	}
	for _, s := range ints(sums[0]["shards"]) {
		if s%4 == 0 {
			t.Fatalf("shard %d listed as taken, its claim failed", s)
		}
	}
}

// A node that dies leaves its shards to several peers: the peers'
// summaries together list each of its shards once, taken from it as a
// stale owner. A rebalance, a burst of several rounds (MaxHandoffs per
// round), is one line on the giver naming the shards per new owner and
// one on each taker.
func TestSummariesAcrossPeers(t *testing.T) {
	w := newWorld(t)
	optA, logsA := observed()
	optB, logsB := observed()
	a := w.node(addrA, optA)
	a.step()
	b := w.node(addrB, optB)
	c := w.node(addrC, nil)
	before := settle(t, w, 60, a, b, c)
	flushed(w, a, b, c)
	if n := logsA.FilterMessage("ORDERED shards handed off to their desired owners").Len(); n != 1 {
		t.Fatalf("A's rebalance in %d hand-off lines, want 1", n)
	}
	if sums := infoTaken(t, logsB, 0); len(sums) != 1 || int(sums[0]["count"].(int64)) != len(b.held()) {
		t.Fatalf("B's claims in %v, want one line counting its %d shards", sums, len(b.held()))
	}

	// A's rebalance hand-offs: the shards B and C hold now, each named once.
	handed := map[string][]int{}
	for _, e := range logsA.FilterMessage("ORDERED shards handed off to their desired owners").All() {
		if e.Level != zapcore.InfoLevel {
			t.Fatalf("hand-off summary at %v", e.Level)
		}
		for to, l := range e.ContextMap()["to"].(map[string][]int) {
			handed[to] = append(handed[to], l...)
		}
	}
	for s, n := range before {
		if n == a {
			continue
		}
		if !slices.Contains(handed[n.self], s) {
			t.Fatalf("shard %d, now %s's, not in A's hand-off summaries %v", s, n.self, handed)
		}
	}
	if got := len(handed[addrB]) + len(handed[addrC]); got != Shards-len(a.held()) || len(handed) != 2 {
		t.Fatalf("A's summaries name %d hand-offs to %d nodes, want %d to B and C", got, len(handed), Shards-len(a.held()))
	}

	cID := c.c.ID()
	markA, markB := logsA.Len(), logsB.Len()
	w.fz.expire(c.conn) // C dies
	after := settle(t, w, 60, a, b)
	flushed(w, a, b)
	taken := map[int]int{}
	for _, sums := range [][]map[string]any{infoTaken(t, logsA, markA), infoTaken(t, logsB, markB)} {
		for _, s := range sums {
			for _, sh := range ints(s["shards"]) {
				taken[sh]++
			}
			for why := range s["why"].(map[string]int) {
				if why != "stale owner "+cID {
					t.Fatalf("why %q, want stale owner %s", why, cID)
				}
			}
		}
	}
	fromC := 0
	for s, n := range before {
		if n != c {
			continue
		}
		fromC++
		if taken[s] != 1 || after[s] == c {
			t.Fatalf("C's shard %d in the summaries %d times, want 1", s, taken[s])
		}
	}
	if len(taken) != fromC {
		t.Fatalf("summaries list %d shards, C held %d", len(taken), fromC)
	}
	noPerShardInfo(t, logsA)
	noPerShardInfo(t, logsB)
}
