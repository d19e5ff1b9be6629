package mysqldb

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// Bounds of RetryConflicts.
const (
	maxConflictAttempts = 12
	firstConflictWait   = time.Millisecond
	maxConflictWait     = 64 * time.Millisecond
)

// RetryConflicts runs one attempt of a reservation and runs it again when
// the server rolled it back because of a conflict: an InnoDB deadlock, or
// a Galera certification failure (reported with the same error 1213 when
// two members wrote one row at once; the loser is rolled back whole).
// Nothing of a rolled-back attempt was stored, so another attempt cannot
// hand out a number twice. The wait between attempts is random and
// doubles (so the losers of one conflict do not collide again), the
// attempts are bounded by maxConflictAttempts and ctx, and every retry is
// counted (ConflictRetries).
//
// ErrRequestVanished from an attempt also runs it again: the request id
// row that refused its insert was gone when it was read.
func (c *Conn) RetryConflicts(ctx context.Context, op string, attempt func() error) error {
	wait := firstConflictWait
	for n := 1; ; n++ {
		err := attempt()
		if err == nil || (!IsDeadlock(err) && !errors.Is(err, ErrRequestVanished)) || n == maxConflictAttempts {
			return err
		}
		c.conflicts.Add(1)
		c.Log.Debug("reservation rolled back by a conflict; retrying", zap.String("op", op),
			zap.Int("attempt", n), zap.Error(err))
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, maxConflictWait)
	}
}

// ConflictRetries returns how many reservation attempts were rolled back
// by a deadlock or a Galera certification conflict and tried again.
func (c *Conn) ConflictRetries() uint64 { return c.conflicts.Load() }
