package mysqlstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// Bounds of retryConflicts.
const (
	maxConflictAttempts = 12
	firstConflictWait   = time.Millisecond
	maxConflictWait     = 64 * time.Millisecond
)

// retryConflicts runs one attempt of a reservation and runs it again when
// the server rolled it back because of a conflict: an InnoDB deadlock, or
// a Galera certification failure (reported with the same error 1213 when
// two members wrote one row at once; the loser is rolled back whole).
// Nothing of a rolled-back attempt was stored, so another attempt cannot
// hand out a number twice. The wait between attempts is random and
// doubles (so the losers of one conflict do not collide again), the
// attempts are bounded by maxConflictAttempts and ctx, and every retry is
// counted (Store.ConflictRetries).
func (s *Store) retryConflicts(ctx context.Context, op string, attempt func() error) error {
	wait := firstConflictWait
	for n := 1; ; n++ {
		err := attempt()
		if err == nil || (!isDeadlock(err) && !errors.Is(err, errRequestVanished)) || n == maxConflictAttempts {
			return err
		}
		s.conflicts.Add(1)
		s.log.Debug("reservation rolled back by a conflict; retrying", zap.String("op", op),
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
func (s *Store) ConflictRetries() uint64 { return s.conflicts.Load() }
