package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// heartbeat writes a look-ahead high-water mark: to last/<node> when
// toZK (registered) and always to the properties file. The holder is
// extended only when every write succeeded, so the mark it may issue up to
// is always durable where a successor will look for it.
func (l *ZKLease) heartbeat(s Slot, meta Meta, toZK bool) taskResult {
	r := taskResult{kind: taskHeartbeat}
	hw := l.nextMark(s.NotBefore)
	if toZK {
		t0 := l.cfg.Clock.Now()
		st, err := l.writeLast(s, hw, false)
		t1 := l.cfg.Clock.Now()
		if err != nil {
			r.err = fmt.Errorf("heartbeat: %w", err)
			return r
		}
		r.hw = hw
		if st != nil && st.Mtime > 0 {
			mid := t0.Add(t1.Sub(t0) / 2)
			r.offset, r.offOK = mid.Sub(time.UnixMilli(st.Mtime)), true
		}
	}
	if err := l.writeProps(s, meta, hw); err != nil {
		r.err = fmt.Errorf("heartbeat: %w", err)
		return r
	}
	r.hw = hw
	if toZK {
		r.member = l.ensureMember(s)
	}
	return r
}

// ensureMember re-creates this node's member znode if it is gone while the
// slot is held (operators and peers find the node through it); it returns
// the new path, or "" when nothing was done. Failures are logged: the
// slot itself is fine.
func (l *ZKLease) ensureMember(s Slot) string {
	l.mu.Lock()
	member := l.member
	l.mu.Unlock()
	if member != "" {
		if ok, _, err := l.conn.Exists(member); err != nil || ok {
			return ""
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.SessionTimeout)
	defer cancel()
	p, err := createMember(ctx, l.conn, l.l.members(l.cfg.IDC), l.memberData(s), l.acl)
	if err != nil {
		l.log.Warn("member znode missing and not re-created; retried at the next heartbeat", zap.String("member", member), zap.Error(err))
		return ""
	}
	l.log.Warn("member znode was missing: re-created", zap.String("was", member), zap.String("member", p))
	return p
}

// resume re-acquires the slot after it was fenced within the same session:
// the slot claim must still be this session's, so nobody else issued under
// it and the holder continues above what it issued itself. The next mark
// is written conditionally, which proves it.
func (l *ZKLease) resume(ctx context.Context, s Slot, meta Meta, sid int64) taskResult {
	r := taskResult{kind: taskResume, sid: sid}
	ok, st, err := l.conn.Exists(l.l.slot(s.IDC, s.Node))
	switch {
	case err != nil:
		r.err = fmt.Errorf("resume: check slot: %w", err)
		return r
	case !ok || st.EphemeralOwner != sid:
		r.err = fmt.Errorf("%w: slot claim %s is no longer this session's", ErrSlotTaken, l.l.slot(s.IDC, s.Node))
		return r
	}
	s.NotBefore = max(s.NotBefore, l.cfg.Holder.LastUsed())
	hw := l.nextMark(s.NotBefore)
	if _, err := l.writeLast(s, hw, false); err != nil {
		r.err = fmt.Errorf("resume: %w", err)
		return r
	}
	r.hw = hw
	if err := l.writeProps(s, meta, hw); err != nil {
		r.err = fmt.Errorf("resume: %w", err)
		return r
	}
	s.HighWater = hw
	r.slot = s
	return r
}

// reclaim claims a slot for a new session sid: after the old session
// expired, or when ZooKeeper answers for the first time after a degraded
// start. The slot held before (s) is preferred; if another node holds it, a
// degraded holder is fenced at once (rule 4) and another slot is taken.
func (l *ZKLease) reclaim(ctx context.Context, degraded bool, s Slot, sid int64, fenceNow func(error)) taskResult {
	r := taskResult{kind: taskReclaim, sid: sid}
	l.mu.Lock()
	lossesBefore := l.losses
	l.mu.Unlock()
	meta, err := l.prepare()
	if err != nil {
		r.err, r.fatal = err, errors.Is(err, ErrMetaMismatch) || errors.Is(err, ErrRegistryMoved)
		return r
	}
	r.meta = meta
	l.mu.Lock()
	ourHW, oldSID, lost, recorded := l.hw, l.sid, l.lostReason, l.losses > lossesBefore
	l.mu.Unlock()
	if lost != "" && !recorded {
		// The client was replaced because ZooKeeper lost writes: mark the
		// cluster restored before anyone takes a slot on its stale marks
		// (unless prepare did already: the record was gone or re-created).
		if err := l.stateLost(lost); err != nil {
			r.err = err
			return r
		}
	}
	if lost != "" {
		l.mu.Lock()
		l.lostReason = ""
		l.mu.Unlock()
	}
	c := l.claimer(meta)
	node := s.Node
	ok, owner, err := c.tryClaim(ctx, s.Node)
	if err != nil {
		r.err = err
		return r
	}
	if !ok && !degraded && owner != 0 && owner == oldSID && l.ownClaimWait(true) {
		// The claim is our own expired session's: ZooKeeper removes it
		// within a session timeout (a restarted server expires restored
		// sessions only then). Taking it back keeps the slot's history
		// ours, so the holder continues above what it issued at once;
		// taking another slot would mean waiting past that slot's mark,
		// up to a whole lead. Retry shortly, but not forever.
		r.err = fmt.Errorf("slot idc %d node %d is still claimed by this node's expired session %s: waiting for ZooKeeper to remove it",
			s.IDC, s.Node, sessionHex(owner))
		return r
	}
	l.ownClaimWait(false)
	if !ok {
		if degraded {
			fenceNow(fmt.Errorf("%w: ZooKeeper is back and slot idc %d node %d (worker %d), used from the cache while it was unreachable, is held by session %s; snowflake stopped, taking another slot",
				ErrSlotTaken, s.IDC, s.Node, s.Worker, sessionHex(owner)))
		} else {
			l.log.Warn("slot held before the session expired is another node's now: taking another",
				zap.Int("node", s.Node), zap.String("holder_session", sessionHex(owner)))
		}
		if node, err = c.claimLRU(ctx, s.Node, l.claimBound(false)); err != nil {
			r.err = err
			return r
		}
	}
	node, last, err := l.readClaimed(ctx, c, node)
	if err != nil {
		if !(degraded && node == s.Node) {
			_ = c.release(node)
		}
		r.err = err
		return r
	}
	zkHW := last.HighWater
	mine := last.Token == l.token || (last.Host == l.cfg.Host && last.Port == l.cfg.Port && last.PID == l.pid)
	markNB, clusterNB := zkHW, l.claimBound(last.exists)
	switch {
	case node == s.Node && !degraded && (!last.exists || mine):
		// Our own slot again after the session expired, and nobody wrote
		// its mark since us (or ZooKeeper lost it, and nobody claimed it
		// after the loss, or they would have written one): only this
		// process issued under it, so continue above what it issued. No
		// cluster bound: the slot's history is this process's own.
		markNB, clusterNB = max(l.cfg.Holder.LastUsed(), s.NotBefore), 0
	case node == s.Node:
		markNB = max(markNB, ourHW)
	}
	l.setLastVersion(last)
	if degraded && node == s.Node {
		if mine || zkHW <= s.NotBefore {
			// Nobody used the slot beyond what the degraded start waited
			// past: keep serving without interruption.
			return l.promote(ctx, s, meta, sid)
		}
		l.log.Error("the cached slot was used by another node while ZooKeeper was unreachable: IDs issued in degraded mode may repeat theirs",
			zap.Int("node", s.Node), zap.Int64("their_high_water_ms", zkHW), zap.Int64("degraded_not_before_ms", s.NotBefore))
		fenceNow(fmt.Errorf("%w: slot idc %d node %d was used by another node up to %d while ZooKeeper was unreachable; waiting past it",
			ErrSlotTaken, s.IDC, s.Node, zkHW))
	}
	slot, member, err := l.enterSlot(ctx, c, meta, node, markNB, clusterNB, false)
	if err != nil {
		r.err, r.fatal = err, errors.Is(err, ErrRegistryMoved)
		return r
	}
	r.slot, r.member, r.hw = slot, member, slot.HighWater
	return r
}

// promote turns the degraded slot into a ZooKeeper claim without fencing:
// the slot is claimed already, its mark is raised and the member
// published. On failure the claim is kept (the holder still serves with
// this slot) and the next attempt finds it this session's.
func (l *ZKLease) promote(ctx context.Context, s Slot, meta Meta, sid int64) taskResult {
	r := taskResult{kind: taskPromote, sid: sid, meta: meta, slot: s}
	if err := l.checkRegistry(); err != nil {
		if r.fatal = errors.Is(err, ErrRegistryMoved); r.fatal {
			// The degraded holder is fenced (fatal): give the claim back.
			_ = l.claimer(meta).release(s.Node)
		}
		r.err = err
		return r
	}
	l.mu.Lock()
	l.ceiling = 0 // the claim is this session's now
	l.mu.Unlock()
	hw := l.nextMark(s.NotBefore)
	if _, err := l.writeLast(s, hw, false); err != nil {
		r.err = fmt.Errorf("claim cached slot: %w", err)
		return r
	}
	r.hw = hw
	if err := l.writeProps(s, meta, hw); err != nil {
		r.err = err
		return r
	}
	if err := l.afterClaim(ctx, s.Node); err != nil {
		r.err = err // the claim is kept: the next attempt finds it this session's
		return r
	}
	s.HighWater = hw
	member, err := createMember(ctx, l.conn, l.l.members(l.cfg.IDC), l.memberData(s), l.acl)
	if err != nil {
		r.err = err
		return r
	}
	r.member, r.slot = member, s
	return r
}

// ownClaimWait tracks how long a re-claim has waited for the slot claim of
// this node's own expired session to disappear. With waiting true it
// starts or continues the wait and reports whether to keep waiting (at
// most two session timeouts); with false it ends the wait.
func (l *ZKLease) ownClaimWait(waiting bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !waiting {
		l.ownWaitSince = time.Time{}
		return false
	}
	now := time.Now()
	if l.ownWaitSince.IsZero() {
		l.ownWaitSince = now
	}
	return now.Sub(l.ownWaitSince) < 2*l.cfg.SessionTimeout
}
