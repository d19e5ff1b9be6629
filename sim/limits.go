package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/idgen/idgen/faults/checker"
)

// The documented limits of the product the simulator can run into, told
// apart from bugs.
//
// With asynchronous replication, what a barrier member remembered is lost
// when the barrier counts it gone (its serving bound passed without an
// acknowledgement: paused, or cut off from ZooKeeper) and the failover
// lost its writes: the next owner of its keys may repeat its numbers.
// The README says so ("Keys no live node remembers"), the guard counts it
// (idgen_ordered_barrier_members_expired_total, alert
// IdgenOrderedBarrierMembersExpired), and the fix is lossless replication.
// A seed whose every violation is of that kind is reported as "limit",
// not as unsafe; one violation that is not makes the seed unsafe.

// limitEvents records what the limit needs: failovers and members counted
// gone, with times, and when each incarnation first ran a statement on
// each server.
type limitEvents struct {
	mu        sync.Mutex
	failovers []failoverEvent
	gone      []goneEvent
	// seen is when an incarnation ("addr#inc") first ran a statement on
	// a server (index: the db's server identity), in order.
	seen map[string][]seenEvent
}

// failoverEvent is a lossy failover: when, and the new server's identity.
type failoverEvent struct {
	at     time.Time
	server int
}

// seenEvent: from at, the incarnation's statements ran on server.
type seenEvent struct {
	at     time.Time
	server int
}

// goneEvent is a member a barrier counted gone: the node's address and
// the incarnation running then.
type goneEvent struct {
	at   time.Time
	addr string
	inc  int
}

func (l *limitEvents) failover(at time.Time, server int) {
	l.mu.Lock()
	l.failovers = append(l.failovers, failoverEvent{at, server})
	l.mu.Unlock()
}

// statementOn records that incarnation inc of addr runs its statements on
// server from at (nodeDB.boundary, before the statement: the moment the
// node learns of a server change, as from a new MySQL connection).
func (l *limitEvents) statementOn(at time.Time, addr string, inc, server int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string][]seenEvent{}
	}
	k := fmt.Sprintf("%s#%d", addr, inc)
	l.seen[k] = append(l.seen[k], seenEvent{at, server})
}

func (l *limitEvents) memberGone(at time.Time, addr string, inc int) {
	l.mu.Lock()
	l.gone = append(l.gone, goneEvent{at, addr, inc})
	l.mu.Unlock()
}

// explains reports whether the limit explains every violation of r: each
// is on an ORDERED key, and between the earlier answer and the later one
// a lossy failover happened and a barrier counted the earlier answer's
// node (that incarnation) gone.
func (l *limitEvents) explains(r *checker.Report) bool {
	if r == nil || len(r.Pairs) == 0 || r.WorkerMs > 0 || r.BadRefusals > 0 || len(r.Pairs) != r.Duplicates+r.Order {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range r.Pairs {
		if !l.explainsPair(p) {
			return false
		}
	}
	return true
}

func (l *limitEvents) explainsPair(p checker.Pair) bool { return l.whyNot(p) == "" }

// whyNot is the evidence the limit lacks for p ("" if it explains p); l.mu
// is held.
func (l *limitEvents) whyNot(p checker.Pair) string {
	if p.Earlier.Channel != checker.Ordered {
		return "not an ORDERED key"
	}
	between := func(t time.Time) bool { return t.After(p.Earlier.End) && t.Before(p.Later.End) }
	failover := false
	for _, f := range l.failovers {
		if between(f.at) {
			failover = true
			break
		}
	}
	if !failover {
		return "no failover between the two answers" + l.firstStatements(p.Earlier.Node, p.Earlier.Inc)
	}
	for _, g := range l.gone {
		if g.addr == p.Earlier.Node && g.inc == p.Earlier.Inc && between(g.at) {
			return ""
		}
	}
	return fmt.Sprintf("%s#%d not counted gone between the two answers", p.Earlier.Node, p.Earlier.Inc)
}

// firstStatements lists when incarnation inc of addr first ran a statement
// on each server after the first ("" if never); l.mu is held.
func (l *limitEvents) firstStatements(addr string, inc int) string {
	out := ""
	for _, e := range l.seen[fmt.Sprintf("%s#%d", addr, inc)] {
		if e.server > 1 {
			out += fmt.Sprintf("; its first statement on mysql-%d at %s", e.server, e.at.Format("15:04:05.000000"))
		}
	}
	return out
}

// evidence is what a run's verdict rests on when it failed: every
// failover and member counted gone, with times, and why the first
// violations the limit does not explain are not explained. A FAILED run
// then shows why it was not "limit" without its logs (seed 1120 failed
// 2 of about 80 replays, only on a loaded machine).
func (l *limitEvents) evidence(r *checker.Report) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	const stamp = "15:04:05.000000"
	var out []string
	for _, f := range l.failovers {
		out = append(out, fmt.Sprintf("failover to mysql-%d at %s", f.server, f.at.Format(stamp)))
	}
	for _, g := range l.gone {
		out = append(out, fmt.Sprintf("counted gone: %s#%d at %s", g.addr, g.inc, g.at.Format(stamp)))
	}
	if r == nil {
		return out
	}
	shown := 0
	for _, p := range r.Pairs {
		why := l.whyNot(p)
		if why == "" {
			continue
		}
		if shown == 4 {
			out = append(out, "... and more not explained")
			break
		}
		shown++
		out = append(out, fmt.Sprintf("not the limit: %s %s, %s#%d answered %s, %s#%d answered %s: %s", p.Kind, p.Space,
			p.Earlier.Node, p.Earlier.Inc, p.Earlier.End.Format(stamp), p.Later.Node, p.Later.Inc, p.Later.End.Format(stamp), why))
	}
	return out
}
