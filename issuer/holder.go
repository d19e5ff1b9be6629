package issuer

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/snowflake"
	"github.com/idgen/idgen/worker"
)

var _ worker.Holder = (*Issuer)(nil)

// Acquired builds the generator for the slot. Its first ID is after both the
// slot's NotBefore and anything this process already issued (the shared
// guard remembers that across generators).
func (is *Issuer) Acquired(s worker.Slot) {
	// Stop the previous generator first, so the new one starts above
	// everything it issued (the shared guard's last committed reading).
	if old := is.gen.Swap(nil); old != nil {
		is.noteLastUsed(old.Stop(errors.New("replaced by a new worker slot")))
	}
	g, err := snowflake.New(snowflake.Config{
		Layout:    is.cfg.Layout,
		IDC:       s.IDC,
		Node:      s.Node,
		Guard:     is.cfg.Guard,
		NotBefore: s.NotBefore,
		CreatedMs: is.createdMs(),
		HighWater: s.HighWater,
		ExtendNow: is.cfg.ExtendNow,
	})
	if err != nil {
		is.log.Error("cannot build the snowflake generator for the acquired slot", zap.Error(err),
			zap.Int("idc", s.IDC), zap.Int("node", s.Node))
		is.fence.Store(&fenceState{reason: err})
		is.gen.Store(nil)
		return
	}
	is.everAcquired.Store(true)
	is.gen.Store(g)
	is.log.Info("snowflake generator ready", zap.Int("worker", g.Worker()), zap.Int("idc", s.IDC), zap.Int("node", s.Node),
		zap.Int64("not_before_ms", g.NotBefore()), zap.Int64("high_water_ms", s.HighWater))
	if wait := g.NotBefore() - clock.Millis(is.cfg.Guard.Clock()); wait >= 0 {
		// Rule 2: the slot's earlier holders may have used timestamps up
		// to NotBefore. Meanwhile SNOWFLAKE answers WORKER_UNAVAILABLE with
		// the time left (or falls back); the other channels serve.
		is.log.Info("snowflake waits until the clock passes the slot's high-water mark",
			zap.Int("worker", g.Worker()), zap.Int64("not_before_ms", g.NotBefore()),
			zap.Duration("wait", time.Duration(wait+1)*time.Millisecond))
	}
}

// createdMs is the cluster creation time behind Config.Floor.
func (is *Issuer) createdMs() int64 {
	if is.cfg.Floor <= 0 {
		return 0
	}
	return is.cfg.Floor>>(snowflake.WorkerBits+snowflake.SequenceBits) + is.cfg.Layout.EpochMs()
}

func (is *Issuer) noteLastUsed(ms int64) {
	for {
		cur := is.lastUsed.Load()
		if ms <= cur || is.lastUsed.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// Extended raises the generator's ceiling.
func (is *Issuer) Extended(highWater int64) {
	if g := is.gen.Load(); g != nil {
		g.Extend(highWater)
	}
}

// Fenced stops snowflake issuance. The generator is stopped under its own
// lock, so a call already issuing finishes first and LastUsed covers it:
// when Fenced returns, nothing more is issued under the slot.
func (is *Issuer) Fenced(reason error) {
	if reason == nil {
		reason = errors.New("worker slot lost")
	}
	is.fence.Store(&fenceState{reason: reason})
	g := is.gen.Swap(nil)
	if g == nil {
		return
	}
	is.noteLastUsed(g.Stop(reason))
	if errors.Is(reason, worker.ErrClosed) {
		is.log.Info("snowflake stopped for shutdown", zap.Int64("last_used_ms", is.LastUsed()))
		return
	}
	is.log.Warn("snowflake fenced: refusing snowflake IDs until the slot is held again", zap.Error(reason))
}

// LastUsed returns the last millisecond actually used in an issued ID by any
// generator of this process (0 if none): the exact high-water mark.
func (is *Issuer) LastUsed() int64 {
	v := is.lastUsed.Load()
	if g := is.gen.Load(); g != nil {
		v = max(v, g.LastUsed())
	}
	return v
}

// Serving reports whether a snowflake generator is active, and if not why.
func (is *Issuer) Serving() (bool, error) {
	if is.gen.Load() != nil {
		return true, nil
	}
	return false, is.fence.Load().reason
}

// Worker returns the current worker field, or -1 when no slot is held.
func (is *Issuer) Worker() int {
	if g := is.gen.Load(); g != nil {
		return g.Worker()
	}
	return -1
}
