package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/idgen/idgen/clock"
)

// maxWaitStep bounds one sleep of waitPast so that cancellation is seen
// promptly and a clock stepped forward ends the wait early.
const maxWaitStep = 50 * time.Millisecond

// checkWait enforces rule 2's refusal: taking a slot whose high-water mark
// notBefore lies more than max ahead of the clock is refused, with the
// figures.
func checkWait(clk clock.Clock, s Slot, max time.Duration) error {
	now := clock.Millis(clk)
	wait := time.Duration(s.NotBefore-now) * time.Millisecond
	if wait > max {
		return fmt.Errorf("%w: slot idc %d node %d (worker %d) may have been used up to %d (%s) but the local clock reads %d (%s): waiting %v is more than MaxStartWait %v; check this host's clock or raise MaxStartWait",
			ErrStartWaitTooLong, s.IDC, s.Node, s.Worker, s.NotBefore, rfc3339(s.NotBefore), now, rfc3339(now), wait, max)
	}
	return nil
}

// waitPast blocks until clk reads a millisecond above notBefore (rule 2: no
// timestamp a previous holder may have used is issued again), or ctx ends.
func waitPast(ctx context.Context, clk clock.Clock, notBefore int64) error {
	for {
		now := clock.Millis(clk)
		if now > notBefore {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for the clock to pass the high-water mark %d (now %d): %w", notBefore, now, err)
		}
		d := time.Duration(notBefore-now+1) * time.Millisecond
		clock.Sleep(clk, min(d, maxWaitStep))
	}
}
