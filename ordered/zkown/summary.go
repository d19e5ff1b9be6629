package zkown

import (
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// claim is what became of one takeover, for the claim summary: taken
// (granted to the handler, which accepted it, after leaseWait), failed (a
// warning said why), or neither (not tried: backing off, the lease broke,
// another node's compare-and-set came first, the coordinator closes).
type claim struct {
	shard     int
	why       string
	taken     bool
	failed    bool
	leaseWait time.Duration
}

// summary gathers the shards this node takes and hands off into one line
// per burst instead of one line per shard (issue 32: 128 lines at every
// start). A burst is a start's claims, a peer's stop (its shards released
// one after another and taken over several rounds) or a rebalance (at
// most MaxHandoffs per round): it ends once no shard changed hands for a
// lease, or at Close. Takeovers finish on several goroutines at once
// (claimParallel), so every count is taken under mu. Each shard's own
// line is at debug.
type summary struct {
	mu sync.Mutex

	// Takeovers: the shards taken, the failures, the reasons, the longest
	// lease wait; from the first round's start to the last round's end.
	taken       []int
	failed      int
	why         map[string]int
	longestWait time.Duration
	first, last time.Time

	// Planned hand-offs to desired owners, per new owner.
	handed     map[string][]int
	handedLast time.Time
}

// begin notes the start of a round's takeovers at now.
func (s *summary) begin(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		s.first = now
	}
}

func (s *summary) add(cl claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case cl.taken:
		s.taken = append(s.taken, cl.shard)
		if s.why == nil {
			s.why = map[string]int{}
		}
		s.why[cl.why]++
		s.longestWait = max(s.longestWait, cl.leaseWait)
	case cl.failed:
		s.failed++
	}
}

// end notes the end of a round's takeovers at now; a round that tried
// nothing leaves the burst's end where it was.
func (s *summary) end(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.taken) > 0 || s.failed > 0 {
		s.last = now
	} else if s.last.IsZero() {
		s.first = time.Time{}
	}
}

// handedOff notes a planned hand-off of shard to the node to at now.
func (s *summary) handedOff(shard int, to string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handed == nil {
		s.handed = map[string][]int{}
	}
	s.handed[to] = append(s.handed[to], shard)
	s.handedLast = now
}

// flush logs the bursts that ended (nothing changed hands for quiet
// before now), or every burst when force (Close), and starts anew.
func (s *summary) flush(log *zap.Logger, now time.Time, quiet time.Duration, force bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if (len(s.taken) > 0 || s.failed > 0) && (force || now.Sub(s.last) >= quiet) {
		slices.Sort(s.taken)
		log.Info("ORDERED shards taken", zap.Int("count", len(s.taken)), zap.Ints("shards", s.taken), zap.Int("failed", s.failed),
			zap.Any("why", s.why), zap.Duration("longest_lease_wait", s.longestWait), zap.Duration("took", s.last.Sub(s.first)))
		s.taken, s.failed, s.why, s.longestWait, s.first, s.last = nil, 0, nil, 0, time.Time{}, time.Time{}
	}
	if len(s.handed) > 0 && (force || now.Sub(s.handedLast) >= quiet) {
		n := 0
		for _, l := range s.handed {
			n += len(l)
		}
		log.Info("ORDERED shards handed off to their desired owners", zap.Int("count", n), zap.Any("to", s.handed))
		s.handed = nil
	}
}
