package issuer

import (
	"errors"
	"fmt"
	"time"

	"github.com/idgen/idgen/snowflake"
)

// SnowflakeStatus is the SNOWFLAKE channel's state for readiness checks and
// metrics, read without issuing anything.
type SnowflakeStatus struct {
	// State is serving, starting (waiting past the slot's mark or the
	// cluster's creation time, or no slot yet), clock_rollback, clock_jump
	// or fenced.
	State      string
	Reason     string
	RetryAfter time.Duration // how long until it may serve, when known
}

// SnowflakeState reports whether SNOWFLAKE would serve now and, if not,
// why. It reads the clock, never the store.
func (is *Issuer) SnowflakeState() SnowflakeStatus {
	g := is.gen.Load()
	if g == nil {
		reason := is.fence.Load().reason
		if is.lastUsed.Load() == 0 && !is.everAcquired.Load() {
			return SnowflakeStatus{State: "starting", Reason: fmt.Sprintf("no worker slot yet: %v", reason), RetryAfter: time.Second}
		}
		return SnowflakeStatus{State: "fenced", Reason: fmt.Sprintf("worker slot not held: %v", reason), RetryAfter: time.Second}
	}
	guard := is.cfg.Guard
	if b := guard.Behind(); b > guard.MaxBackwardWait() {
		return SnowflakeStatus{State: "clock_rollback", RetryAfter: b,
			Reason: fmt.Sprintf("clock is %v behind the last issued timestamp (tolerance %v): refusing SNOWFLAKE until it catches up", b, guard.MaxBackwardWait())}
	}
	now := guard.Clock().Now().UnixMilli()
	if wait := g.NotBefore() + 1 - now; wait > guard.MaxBackwardWait().Milliseconds() {
		return SnowflakeStatus{State: "starting", RetryAfter: time.Duration(wait) * time.Millisecond,
			Reason: fmt.Sprintf("waiting %v for the clock to pass the worker slot's high-water mark (or the cluster's creation time)", time.Duration(wait)*time.Millisecond)}
	}
	if c := g.HighWater(); c != 0 && now > c {
		return SnowflakeStatus{State: "clock_jump", RetryAfter: JumpRetryAfter,
			Reason: (&snowflake.JumpError{NowMs: now, HighWaterMs: c}).Error()}
	}
	return SnowflakeStatus{State: "serving"}
}

// errNotAcquired is the fence reason before the first slot.
var errNotAcquired = errors.New("worker slot not acquired yet")
