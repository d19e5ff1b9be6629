package issuer

import (
	"errors"

	"go.uber.org/zap"

	"github.com/idgen/idgen/snowflake"
	"github.com/idgen/idgen/worker"
)

var _ worker.Holder = (*Issuer)(nil)

// Acquired builds the generator for the slot. Its first ID is after both the
// slot's NotBefore and anything this process already issued (the shared
// guard remembers that across generators).
func (is *Issuer) Acquired(s worker.Slot) {
	g, err := snowflake.New(snowflake.Config{
		Layout:    is.cfg.Layout,
		IDC:       s.IDC,
		Node:      s.Node,
		Guard:     is.cfg.Guard,
		NotBefore: s.NotBefore,
		HighWater: s.HighWater,
	})
	if err != nil {
		is.log.Error("cannot build the snowflake generator for the acquired slot", zap.Error(err),
			zap.Int("idc", s.IDC), zap.Int("node", s.Node))
		is.fence.Store(&fenceState{reason: err})
		is.gen.Store(nil)
		return
	}
	is.gen.Store(g)
	is.log.Info("snowflake serving", zap.Int("worker", g.Worker()), zap.Int("idc", s.IDC), zap.Int("node", s.Node),
		zap.Int64("not_before_ms", s.NotBefore), zap.Int64("high_water_ms", s.HighWater))
}

// Extended raises the generator's ceiling.
func (is *Issuer) Extended(highWater int64) {
	if g := is.gen.Load(); g != nil {
		g.Extend(highWater)
	}
}

// Fenced stops snowflake issuance at once.
func (is *Issuer) Fenced(reason error) {
	if reason == nil {
		reason = errors.New("worker slot lost")
	}
	is.fence.Store(&fenceState{reason: reason})
	if is.gen.Swap(nil) != nil {
		is.log.Warn("snowflake fenced: refusing snowflake IDs until the slot is held again", zap.Error(reason))
	}
}

// LastUsed returns the highest millisecond any generator of this process
// used (the shared guard's last reading).
func (is *Issuer) LastUsed() int64 { return is.cfg.Guard.Last() }

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
