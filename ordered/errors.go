package ordered

import (
	"fmt"
	"time"

	"github.com/idgen/idgen/segment"
)

// UnavailableError is a fast, retryable refusal of the Allocator: this node
// does not own the sub key's shard (NotOwner, with the owner it knows of, so
// the caller can forward), or owns it but may not answer now (the lease
// wait after a takeover, a lease that could not be renewed, a hand-off in
// progress, the store down). It wraps segment.ErrUnavailable.
type UnavailableError struct {
	Shard int
	// NotOwner: the shard is not this node's; Owner says whose it is as
	// far as this node knows (Addr "" while it has none).
	NotOwner bool
	Owner    Owner
	Reason   string
	// RetryAfter hints how long until the refusal may pass (0: soon).
	RetryAfter time.Duration
	Err        error // the store's error, if any
}

func (e *UnavailableError) Error() string {
	msg := fmt.Sprintf("ordered shard %d: %s", e.Shard, e.Reason)
	if e.NotOwner && e.Owner.Addr != "" {
		msg += fmt.Sprintf(" (owner %s, epoch %d)", e.Owner.Addr, e.Owner.Epoch)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns segment.ErrUnavailable and the store's error.
func (e *UnavailableError) Unwrap() []error {
	if e.Err != nil {
		return []error{segment.ErrUnavailable, e.Err}
	}
	return []error{segment.ErrUnavailable}
}
