package scenario

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/faults/harness"
)

// takeoverRounds is how many kills of each kind ordered-takeover-gap makes.
const takeoverRounds = 3

// orderedTakeoverGap measures what a SIGKILLed owner costs its hot keys
// with the server's default --ordered-lease (issue 31, item 5): the hot
// shard's current owner SIGKILLed takeoverRounds times (restarted once
// another node serves the keys, then left to settle), and takeoverRounds
// times SIGKILLed and restarted at once at the same address. Each kill's
// figure is the time from the kill to the slowest hot key's first
// successful ORDERED answer (gapless and cached); the notes give each and
// the medians. The checks are the usual ones (no duplicate, no order
// violation); the times are measurements, never asserted.
func orderedTakeoverGap(r *Run) error {
	// The server's default session timeout too: the suite's 3 s would
	// expire a killed node's znode about when it turns stale, and a gone
	// znode restarts the lease wait (the absence rule).
	s, err := ordCluster(r, ordOpts{Victim: 1, ServerLease: true, ClusterOpts: ClusterOpts{Session: "10s"}})
	if err != nil {
		return err
	}
	s.startLoad(r)
	r.Sleep(3 * time.Second)
	var kills, restarts []time.Time
	for i := range 2 * takeoverRounds {
		restartAtOnce := i >= takeoverRounds
		a, err := s.waitOwner(s.c.Active(), nil, 30*time.Second)
		if err != nil {
			return err
		}
		a.Kill()
		t := time.Now()
		if restartAtOnce {
			restarts = append(restarts, t)
			if err := a.Start(60 * time.Second); err != nil {
				return err
			}
			r.Note("round %d: SIGKILL %s (owner of shard %d), restarted at once (up %v after the kill)", i+1, a.Name, s.shard, time.Since(t).Round(10*time.Millisecond))
		} else {
			kills = append(kills, t)
			b, err := s.waitOwner(s.activeBut(a), []*harness.Node{a}, 30*time.Second)
			if err != nil {
				return err
			}
			r.Note("round %d: SIGKILL %s (owner of shard %d); %s owns it %v after the kill", i+1, a.Name, s.shard, b.Name, time.Since(t).Round(10*time.Millisecond))
			r.Sleep(time.Second)
			if err := a.Start(60 * time.Second); err != nil {
				return err
			}
		}
		// Every hot key served again, then settled: every node agrees on
		// the shards for a while (the restarted node gets its shards back
		// by hand-off), so each kill is measured on its own.
		if err := s.waitHotServed(r, t, 60*time.Second); err != nil {
			return err
		}
		if _, err := waitSettled(s.c.Active(), 3*time.Second, 60*time.Second); err != nil {
			return err
		}
	}
	r.Sleep(time.Second)
	r.StopLoad()
	hot := map[string][]string{bizGapless: keyList(s.hotKeys(bizGapless)), bizCached: keyList(s.hotKeys(bizCached))}
	r.Note("kill (restarted after the takeover): %s", takeoverNote(r.calls, hot, kills))
	r.Note("kill + restart at once at the same address: %s", takeoverNote(r.calls, hot, restarts))
	s.report(r)
	return nil
}

// activeBut is the active nodes but n.
func (s *ordSetup) activeBut(n *harness.Node) []*harness.Node {
	var out []*harness.Node
	for _, x := range s.c.Active() {
		if x != n {
			out = append(out, x)
		}
	}
	return out
}

// takeoverNote gives, for each kill, the time from it to the slowest hot
// key's first successful ORDERED answer after it, and their median.
func takeoverNote(calls []checker.Call, hot map[string][]string, kills []time.Time) string {
	var gaps []time.Duration
	var parts []string
	for _, k := range kills {
		var worst time.Duration
		for biz, keys := range hot {
			for _, key := range keys {
				var first time.Time
				for i := range calls {
					c := &calls[i]
					if c.OK() && c.Biz == biz && c.SubKey == key && c.Channel == checker.Ordered && c.End.After(k) &&
						(first.IsZero() || c.End.Before(first)) {
						first = c.End
					}
				}
				if first.IsZero() {
					worst = max(worst, time.Hour) // never served again
					continue
				}
				worst = max(worst, first.Sub(k))
			}
		}
		gaps = append(gaps, worst)
		parts = append(parts, secs(worst))
	}
	if len(gaps) == 0 {
		return "none"
	}
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	return fmt.Sprintf("hot keys serving again after %s (median %s)", strings.Join(parts, ", "), secs(sorted[len(sorted)/2]))
}

// waitHotServed waits until every hot key of both businesses got a
// successful ORDERED answer to a call started after t.
func (s *ordSetup) waitHotServed(r *Run, t time.Time, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		missing := ""
		for _, biz := range []string{bizGapless, bizCached} {
			for _, key := range keyList(s.hotKeys(biz)) {
				if missing == "" && okSince(r, biz, key, t) == 0 {
					missing = biz + "/" + key
				}
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hot key %s not served within %v after %v", missing, d, t.Format("15:04:05.000"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
