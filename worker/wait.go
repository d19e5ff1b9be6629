package worker

import (
	"fmt"
	"time"

	"github.com/idgen/idgen/clock"
)

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
