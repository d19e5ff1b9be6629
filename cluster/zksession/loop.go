package zksession

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
)

// Timing of the redial rules (see the package doc).
const (
	// RedialAfter is how many refused handshakes in a row (TCP connected,
	// closed before a session) make the Session apply every rule; a client
	// without a session for RefusalCheckEvery is checked for lost writes
	// alone (its handshakes may hang rather than be refused: the client
	// waits up to ten receive timeouts for an answer).
	RedialAfter = 3
	// RefusalCheckEvery is how often the servers are asked while the
	// client has no session.
	RefusalCheckEvery = time.Second
	// LostWritesConfirm is how far apart two probes must both find every
	// answering serving server below the client's zxid before the
	// ensemble counts as having lost writes (issue 29 hole g: one probe
	// can catch a follower that lags by a few writes).
	LostWritesConfirm = time.Second
	// RedialWithin is how long after the servers answer again a client
	// they refuse (its zxid above theirs: a restore or a wipe) takes to be
	// replaced: a probe, and the confirming one. A guard that waits for
	// other nodes to come back after a restore waits at least this.
	RedialWithin = RefusalCheckEvery + LostWritesConfirm
	// srvrTimeout is how long each server may take to answer srvr (a
	// loaded server answers slowly; no answer counts as not serving).
	srvrTimeout = 3 * time.Second
	// checkBackoff bounds the retry delay of a Check that could not tell.
	checkBackoffMin = 100 * time.Millisecond
	checkBackoffMax = 5 * time.Second
	// tick is how often the loop looks at the clock when nothing happens.
	tick = 100 * time.Millisecond
)

// verdict is what the servers said about a client without a session.
type verdict struct {
	replace bool   // the session is gone: connect a new client
	lost    string // non-empty: ZooKeeper lost writes this client saw (why)
	serving bool   // some server serves clients
	below   bool   // every answering serving server is below the client's zxid
	why     string // for the log
}

// judgeInput is what a probe is judged on, taken from the Session's state.
type judgeInput struct {
	since        time.Time // when the session was lost
	servingSince time.Time // servers first seen serving during this loss (zero: not yet)
	belowSince   time.Time // first probe of an unbroken run that found every server below seen (zero: none)
	refusals     int
	seen         int64 // highest zxid the client saw
}

// judge decides whether the client's session is gone (see the package
// doc) from the servers' answers.
func (s *Session) judge(in judgeInput, stats []ServerStat, now time.Time) verdict {
	var v verdict
	var lagging []string
	answered := 0
	for _, st := range stats {
		if st.Err != nil || !st.Serving {
			continue
		}
		v.serving = true
		answered++
		if st.Zxid < in.seen {
			lagging = append(lagging, fmt.Sprintf("%s at 0x%x", st.Server, st.Zxid))
		}
	}
	v.below = answered > 0 && len(lagging) == answered
	confirmed := v.below && !in.belowSince.IsZero() && now.Sub(in.belowSince) >= LostWritesConfirm
	if faultAnyServerBelow() {
		confirmed = len(lagging) > 0 // hole g reopened: one probe, one server
	}
	if confirmed && in.seen > 0 {
		v.replace = true
		v.lost = fmt.Sprintf("every serving ZooKeeper server that answers (%v) is below zxid 0x%x that this node saw, for %v: the ensemble lost writes (wiped or restored from an older copy)",
			lagging, in.seen, now.Sub(in.belowSince).Round(time.Millisecond))
		if faultAnyServerBelow() {
			v.lost = fmt.Sprintf("IDGEN_FAULT_ZXID_ANY_SERVER=1: ZooKeeper server(s) %v below zxid 0x%x that this node saw: judged as lost writes", lagging, in.seen)
		}
		v.why = v.lost
		return v
	}
	switch {
	case v.serving && !in.servingSince.IsZero() && now.Sub(in.servingSince) > s.cfg.SessionTimeout:
		// A serving ensemble that has not heard from a session for a
		// session timeout has expired it (an election gives every session
		// a fresh timeout when the new leader starts, which servingSince
		// follows), so the old client can only get a new session: a new
		// client does that without waiting for its handshakes, which may
		// hang for ten receive timeouts on a loaded server. And a serving
		// server closes a handshake only for a client that saw a newer
		// zxid than its own: refused that long, it lost writes this
		// client saw.
		v.replace = true
		v.why = fmt.Sprintf("ZooKeeper has served for %v, more than the session timeout %v, without giving this client its session back: the session is gone",
			now.Sub(in.servingSince).Round(time.Millisecond), s.cfg.SessionTimeout)
		if in.refusals >= RedialAfter {
			v.why = fmt.Sprintf("ZooKeeper serves but has refused this client for %v, more than the session timeout %v: it lost writes this client saw",
				now.Sub(in.servingSince).Round(time.Millisecond), s.cfg.SessionTimeout)
			v.lost = v.why
		}
	case in.refusals < RedialAfter && v.below:
		v.why = "every serving ZooKeeper server that answers is below the zxid this node saw: confirming on the next probe (a lagging follower catches up in milliseconds)"
	case in.refusals < RedialAfter:
		v.why = "disconnected from ZooKeeper; no server has lost writes this client saw: keeping the session"
	case !v.serving && now.Sub(in.since) > s.cfg.Lead:
		v.replace = true
		v.why = fmt.Sprintf("no ZooKeeper server says why it refuses this client (srvr unanswered) and the refusals have lasted %v, past the lead %v",
			now.Sub(in.since).Round(time.Millisecond), s.cfg.Lead)
	case v.serving:
		v.why = "ZooKeeper serves again (an election or a sync ended); waiting for the session to come back"
	default:
		v.why = "no ZooKeeper server serves (an election, or servers still syncing): keeping the session"
	}
	return v
}

// judged is a probe's outcome: a verdict, and a new client when it said
// replace.
type judged struct {
	gen     int // the client judged
	v       verdict
	conn    ZK
	events  <-chan zk.Event
	err     error
	refused int
}

// checked is a Check's outcome for one connection of one client.
type checked struct {
	gen, conns int
	restored   bool
	why        string
	err        error
}

// loopState is the loop's own state (only the loop goroutine touches it).
type loopState struct {
	judging, checking bool
	nextJudge         time.Time // refusals are judged again from then on
	servingSince      time.Time
	belowSince        time.Time
	refusalLogged     bool
	checkAt           time.Time // the next Check attempt, after a failure
	backoff           time.Duration
	checkErrLogged    bool
}

// run is the Session's one goroutine that probes the servers, replaces
// the client and runs the check. It never blocks on ZooKeeper: probes,
// connects and checks run in their own goroutines and report back.
func (s *Session) run() {
	defer close(s.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	judgedCh := make(chan judged, 1)
	checkedCh := make(chan checked, 1)
	var ls loopState
	for {
		s.step(&ls, judgedCh, checkedCh)
		select {
		case <-s.ctx.Done():
			// Wait for what runs (a probe is bounded by srvrTimeout, a
			// check by the cancelled context): it may hold a client to
			// close.
			for ls.judging || ls.checking {
				select {
				case r := <-judgedCh:
					ls.judging = false
					if r.conn != nil {
						r.conn.Close()
					}
				case <-checkedCh:
					ls.checking = false
				}
			}
			return
		case <-s.wake:
		case <-t.C:
		case r := <-judgedCh:
			ls.judging = false
			s.applyJudged(&ls, r)
		case r := <-checkedCh:
			ls.checking = false
			s.applyChecked(&ls, r)
		}
	}
}

// step starts a probe or a check when one is due.
func (s *Session) step(ls *loopState, judgedCh chan judged, checkedCh chan checked) {
	now := s.cfg.Now()
	s.mu.Lock()
	v, zkHas, gone, gen, conns := s.v, s.zkHas, s.gone, s.v.Client, s.conns
	seen := s.maxZxid
	needAuth := s.cfg.Auth != "" && s.authed != gen
	s.mu.Unlock()
	if v.Closed {
		return
	}
	if zkHas {
		ls.servingSince, ls.belowSince, ls.refusalLogged = time.Time{}, time.Time{}, false
	}
	// The check (and the credential) of a connection with a session.
	if zkHas && !v.Has && v.Refused == "" && !ls.checking && !now.Before(ls.checkAt) {
		ls.checking = true
		go func() {
			r := checked{gen: gen, conns: conns}
			if needAuth {
				if err := s.h.get().AddAuth("digest", []byte(s.cfg.Auth)); err != nil {
					r.err = fmt.Errorf("ZooKeeper digest authentication: %w", err)
					checkedCh <- r
					return
				}
			}
			if s.cfg.Check != nil {
				// The client itself: the handle refuses requests until
				// the check has passed.
				r.restored, r.why, r.err = s.cfg.Check(s.ctx, s.h.get())
				if needAuth && r.err != nil {
					// The credential is on the client: do not add it twice.
					r.err = &authedErr{r.err}
				}
			}
			checkedCh <- r
		}()
		return
	}
	if zkHas || ls.judging || now.Before(ls.nextJudge) {
		return
	}
	if !gone && v.Refusals < RedialAfter && now.Sub(v.LostAt) < RefusalCheckEvery {
		return
	}
	ls.judging = true
	in := judgeInput{since: v.LostAt, servingSince: ls.servingSince, belowSince: ls.belowSince, refusals: v.Refusals, seen: seen}
	go func() {
		r := judged{gen: gen, refused: v.Refusals}
		if gone {
			r.v = verdict{replace: true, why: "the ZooKeeper client closed its event channel: it will not get a session again"}
		} else {
			r.v = s.judge(in, s.cfg.ServerStats(s.cfg.Servers, srvrTimeout), s.cfg.Now())
		}
		if r.v.replace {
			s.log.Warn("the ZooKeeper session is gone: connecting a new client; every guard's ephemeral znodes are claimed again under the new session",
				zap.Int("refused_handshakes", r.refused), zap.String("why", r.v.why))
			r.conn, r.events, r.err = s.cfg.Connect(s.cfg.Servers, s.cfg.SessionTimeout)
		}
		judgedCh <- r // buffer 1, one probe at a time: never blocks; Close waits for it
	}()
}

// authedErr marks a Check error after the credential was added.
type authedErr struct{ error }

func (e *authedErr) Unwrap() error { return e.error }

// applyJudged applies a probe's verdict.
func (s *Session) applyJudged(ls *loopState, r judged) {
	defer s.applied.Add(1)
	now := s.cfg.Now()
	s.mu.Lock()
	current := r.gen == s.v.Client && !s.v.Closed
	s.mu.Unlock()
	if !current {
		if r.conn != nil {
			r.conn.Close()
		}
		return
	}
	ls.nextJudge = now.Add(RefusalCheckEvery)
	if !r.v.replace {
		if r.v.serving && ls.servingSince.IsZero() {
			ls.servingSince = now
		}
		if r.v.below {
			if ls.belowSince.IsZero() {
				ls.belowSince = now
			}
		} else {
			ls.belowSince = time.Time{}
		}
		if r.refused >= RedialAfter && !ls.refusalLogged {
			ls.refusalLogged = true // once per run of refusals
			s.log.Info("ZooKeeper refuses this client's handshakes: keeping the session", zap.String("why", r.v.why))
		}
		return
	}
	if r.err != nil {
		s.log.Warn("connecting a new ZooKeeper client failed; trying again", zap.Error(r.err))
		return
	}
	ls.servingSince, ls.belowSince, ls.refusalLogged = time.Time{}, time.Time{}, false
	ls.checkAt, ls.backoff, ls.checkErrLogged = time.Time{}, 0, false
	if r.v.lost != "" && s.cfg.Check == nil {
		// Without an incarnation check, the lost-writes verdict is the
		// restore detector.
		s.mu.Lock()
		s.v.Restores++
		s.v.RestoredAt = s.cfg.Now()
		s.v.RestoreWhy = r.v.lost
		s.mu.Unlock()
		s.log.Error("ZooKeeper lost writes: counted as a restore; every guard applies the restore rule", zap.String("why", r.v.lost))
	}
	s.attach(r.conn, r.events)
}

// applyChecked applies a Check's outcome.
func (s *Session) applyChecked(ls *loopState, r checked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.gen != s.v.Client || s.v.Closed {
		return
	}
	var ae *authedErr
	if r.err == nil || errors.As(r.err, &ae) {
		s.authed = r.gen
	}
	if r.err == nil && r.restored {
		// Counted even when the connection dropped meanwhile: ZooKeeper
		// was seen wiped or restored.
		s.v.Restores++
		s.v.RestoredAt = s.cfg.Now()
		s.v.RestoreWhy = r.why
		s.log.Error("ZooKeeper was wiped or restored from an older copy: every guard applies the restore rule",
			zap.String("why", r.why), zap.Uint64("restores", s.v.Restores))
		s.signal()
	}
	if r.conns != s.conns || !s.zkHas {
		return // reconnected or lost meanwhile: checked again at the next session
	}
	switch {
	case r.err == nil:
		ls.checkAt, ls.backoff, ls.checkErrLogged = time.Time{}, 0, false
		s.usableLocked()
		s.signal()
	case errors.Is(r.err, ErrRefused):
		s.v.Refused = r.err.Error()
		s.log.Error("the ZooKeeper cluster check refused this node: every guard stops serving until it is fixed and the node restarted",
			zap.Error(r.err))
		s.signal()
	default:
		ls.backoff = min(max(2*ls.backoff, checkBackoffMin), checkBackoffMax)
		ls.checkAt = s.cfg.Now().Add(ls.backoff)
		if !ls.checkErrLogged {
			ls.checkErrLogged = true
			s.log.Warn("the ZooKeeper cluster check cannot tell yet: the session is not used until it passes; retrying",
				zap.Error(r.err), zap.Duration("retry_in", ls.backoff))
		}
	}
}
