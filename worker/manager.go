package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster/zksession"
)

// The manager is the lease's one goroutine that calls the Holder and
// changes the lease's state. It never blocks on ZooKeeper: heartbeats and
// re-claims run as tasks in their own goroutine (one at a time) and report
// back, so a hung request cannot delay fencing.

// taskKind names what a task did.
type taskKind int

const (
	taskHeartbeat taskKind = iota // wrote a look-ahead mark
	taskResume                    // same session again after a disconnect
	taskReclaim                   // new session: slot claimed again
	taskPromote                   // degraded slot claimed in ZooKeeper, no interruption
	taskFenceNow                  // intermediate: fence at once (task goes on)
)

type taskResult struct {
	kind   taskKind
	gen    uint64
	err    error
	fatal  bool // do not retry (e.g. settings differ)
	slot   Slot
	sid    int64
	member string
	meta   Meta
	hw     int64
	offset time.Duration
	offOK  bool
}

// retryDelay is how long the manager waits before retrying a failed
// re-claim or resume.
const retryDelay = time.Second

type manager struct {
	l       *ZKLease
	ctx     context.Context
	results chan taskResult
	busy    bool
	gen     uint64 // bumped whenever the holder is fenced or acquires

	mode         State
	seenExpired  uint64
	seenRestores uint64
	needResume   bool // same session back after a fence: re-acquire
	needReclaim  bool // new session (or ZooKeeper back after degraded)
	broken       error

	lossLogged bool // the current connection loss was logged
	retryTimer *time.Timer
	retryDue   bool // false while a failed task's retry delay runs
}

func (l *ZKLease) run(ctx context.Context) {
	defer close(l.done)
	v := l.sess.View()
	l.mu.Lock()
	mode := l.state
	l.mu.Unlock()
	m := &manager{
		l: l, ctx: ctx, results: make(chan taskResult, 4),
		mode: mode, seenExpired: v.Expired, seenRestores: v.Restores, retryDue: true,
		retryTimer: stoppedTimer(),
	}
	m.loop()
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func (m *manager) loop() {
	tick := time.NewTicker(m.l.cfg.HeartbeatInterval)
	defer tick.Stop()
	defer m.retryTimer.Stop()
	for {
		v, changed := m.l.sess.ViewChanged()
		m.observe(v)
		m.startTask(v, false)
		select {
		case <-m.ctx.Done():
			m.shutdown()
			return
		case <-changed:
		case <-m.retryTimer.C:
			m.retryDue = true
		case <-tick.C:
			v := m.l.sess.View()
			m.observe(v)
			m.startTask(v, true)
		case <-m.l.extend:
			// The holder's clock is near or past the mark: write the next
			// one now (if a task runs, the next loop turn or tick does).
			v := m.l.sess.View()
			m.observe(v)
			m.startTask(v, true)
		case r := <-m.results:
			m.handle(r)
		}
	}
}

// observe reacts to the session view: expiry fences at once, a new session
// asks for a re-claim, the same session back after a fence asks for a
// resume. A lost connection does not fence: the holder keeps serving up to
// its durable mark (the generator's ceiling), which a next holder of the
// slot waits past, so uniqueness does not depend on noticing the loss.
//
// A restore counted by the session (View.Restores: the incarnation check,
// or the lost-writes rule) is recorded in the cluster record at the next
// re-claim, before any slot is taken on stale marks; when the session
// itself survived (the check found the restore on the same session), the
// slot is fenced and claimed again, so that re-claim happens now.
func (m *manager) observe(v zksession.View) {
	l := m.l
	l.mu.Lock()
	sid, hasSlot := l.sid, l.hasSlot
	l.mu.Unlock()
	if v.Restores != m.seenRestores {
		m.seenRestores = v.Restores
		l.mu.Lock()
		l.lostReason = v.RestoreWhy
		l.mu.Unlock()
		if v.Has && v.ID == sid && sid != 0 && !m.needReclaim {
			if m.mode == StateRegistered {
				m.fence(fmt.Errorf("%w: ZooKeeper was wiped or restored (%s): the slot is claimed again, above every mark", ErrSlotTaken, v.RestoreWhy))
			}
			m.needResume, m.needReclaim = false, true
		}
	}
	if v.Expired != m.seenExpired {
		m.seenExpired = v.Expired
		if m.mode == StateRegistered {
			m.fence(fmt.Errorf("%w: session %s of slot idc %d node %d is gone and the slot may be another node's now",
				ErrSessionExpired, sessionHex(sid), l.cfg.IDC, l.slotNode()))
		}
	}
	if !v.Has {
		if m.mode == StateRegistered && !m.lossLogged {
			m.lossLogged = true // logged once per loss
			l.mu.Lock()
			hw := l.hw
			l.mu.Unlock()
			l.log.Warn("ZooKeeper connection lost: serving SNOWFLAKE up to the durable high-water mark, then refusing until ZooKeeper is back",
				zap.Int64("high_water_ms", hw), zap.Duration("outage_tolerance", l.cfg.OutageTolerance))
		}
		return
	}
	m.disarmFence()
	switch {
	case v.ID != sid:
		// A session other than the slot's: the old one expired (its
		// ephemeral znodes are gone), or ZooKeeper is back after a degraded
		// start. Either way the slot must be claimed again.
		if m.mode == StateRegistered {
			m.fence(fmt.Errorf("%w: new session %s replaced %s", ErrSessionExpired, sessionHex(v.ID), sessionHex(sid)))
		}
		m.needReclaim = true
	case m.mode == StateFenced && hasSlot && !m.needReclaim:
		m.needResume = true
	}
}

func (m *manager) disarmFence() {
	m.lossLogged = false
}

// startTask starts the most urgent pending task, if none runs.
func (m *manager) startTask(v zksession.View, tick bool) {
	if m.busy || m.broken != nil {
		return
	}
	l := m.l
	l.mu.Lock()
	s, sid, meta := l.slot, l.sid, l.meta
	l.mu.Unlock()
	switch {
	case m.needReclaim && v.Has && m.retryDue:
		degraded := m.mode == StateDegraded
		m.run(func(ctx context.Context, fenceNow func(error)) taskResult {
			return l.reclaim(ctx, degraded, s, v.ID, fenceNow)
		})
	case m.needResume && v.Has && v.ID == sid && m.retryDue:
		m.run(func(ctx context.Context, _ func(error)) taskResult { return l.resume(ctx, s, meta, sid) })
	case tick && m.mode == StateRegistered && v.Has && v.ID == sid:
		m.run(func(context.Context, func(error)) taskResult { return l.heartbeat(s, meta, true) })
	case tick && m.mode == StateDegraded:
		m.run(func(context.Context, func(error)) taskResult { return l.heartbeat(s, meta, false) })
	}
}

// run starts f as the one running task. f may call fenceNow to have the
// holder fenced at once while it goes on.
func (m *manager) run(f func(ctx context.Context, fenceNow func(error)) taskResult) {
	m.busy = true
	gen := m.gen
	go func() {
		r := f(m.ctx, func(reason error) { m.results <- taskResult{kind: taskFenceNow, err: reason} })
		r.gen = gen
		m.results <- r
	}()
}

// handle applies a task's result.
func (m *manager) handle(r taskResult) {
	l := m.l
	if r.kind == taskFenceNow {
		m.fence(r.err)
		return
	}
	m.busy = false
	if r.hw > 0 {
		l.raiseMark(r.hw)
	}
	if r.err != nil {
		m.failed(r)
		return
	}
	v := l.sess.View()
	switch r.kind {
	case taskHeartbeat:
		l.mu.Lock()
		l.beatAt = time.Now()
		if r.member != "" {
			l.member = r.member
		}
		if r.offOK {
			l.offset, l.offsetKnown = r.offset, true
		}
		l.mu.Unlock()
		if r.gen == m.gen && (m.mode == StateRegistered || m.mode == StateDegraded) {
			l.cfg.Holder.Extended(r.hw)
		}
	case taskResume, taskReclaim:
		l.mu.Lock()
		l.slot, l.hasSlot, l.sid, l.beatAt = r.slot, true, r.sid, time.Now()
		if r.member != "" {
			l.member = r.member
		}
		if r.kind == taskReclaim {
			l.meta = r.meta
		}
		l.mu.Unlock()
		m.needResume, m.needReclaim = false, false
		if !v.Has || v.ID != r.sid {
			return // lost again meanwhile: observe decides what next
		}
		m.acquire(r.slot)
	case taskPromote:
		l.mu.Lock()
		l.slot.HighWater = r.hw
		l.sid, l.member, l.meta, l.beatAt = r.sid, r.member, r.meta, time.Now()
		l.mu.Unlock()
		m.needReclaim = false
		if m.mode == StateDegraded {
			m.setMode(StateRegistered)
			l.log.Info("ZooKeeper is back: cached worker slot claimed, degraded mode over", slotFields(r.slot, r.sid)...)
			l.cfg.Holder.Extended(r.hw)
		}
	}
}

func (m *manager) failed(r taskResult) {
	l := m.l
	if r.fatal {
		m.broken = r.err
		m.fence(r.err)
		l.log.Error("worker lease stopped: it will not claim a slot again until restarted", zap.Error(r.err))
		return
	}
	if errors.Is(r.err, ErrSlotTaken) {
		// A conditional mark write failed: someone else wrote the slot's
		// mark. Stop at once and claim a slot again.
		m.fence(r.err)
		m.needResume, m.needReclaim = false, true
	}
	if m.ctx.Err() != nil {
		return
	}
	l.log.Warn("worker lease task failed: retrying", zap.Error(r.err))
	if r.kind != taskHeartbeat {
		m.retryDue = false
		m.retryTimer.Reset(retryDelay)
	}
}

// fence stops the holder (rule 1) if it is serving. A fence is a fault
// (the slot lost, taken, or its marks unwritable) and is warned about;
// the planned stop of a clean shutdown (reason ErrClosed, shutdown) stops
// the holder the same way but is expected: info.
func (m *manager) fence(reason error) {
	if m.mode != StateRegistered && m.mode != StateDegraded {
		return
	}
	m.gen++
	m.setMode(StateFenced)
	if errors.Is(reason, ErrClosed) {
		m.l.log.Info("worker slot released for shutdown: snowflake IDs stopped", zap.Error(reason))
	} else {
		m.l.log.Warn("worker slot fenced: snowflake IDs stopped", zap.Error(reason))
	}
	m.l.cfg.Holder.Fenced(reason)
}

// acquire hands the slot to the holder.
func (m *manager) acquire(s Slot) {
	m.gen++
	m.setMode(StateRegistered)
	m.l.log.Info("worker slot acquired", slotFields(s, m.l.sessID())...)
	m.l.cfg.Holder.Acquired(s)
}

func (m *manager) setMode(s State) {
	m.mode = s
	m.l.mu.Lock()
	m.l.state = s
	m.l.mu.Unlock()
}

// shutdown fences the holder before Close reads its last used millisecond.
func (m *manager) shutdown() {
	for m.busy {
		// The task sees the cancelled context or, past Close's deadline, a
		// closed client.
		if r := <-m.results; r.kind != taskFenceNow {
			m.busy = false
		}
	}
	m.fence(fmt.Errorf("%w: shutting down", ErrClosed))
}

func (l *ZKLease) slotNode() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slot.Node
}

func (l *ZKLease) sessID() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sid
}
