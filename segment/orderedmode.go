package segment

import "fmt"

// OrderedMode is how the owner of an ORDERED shard persists a business's
// numbers (package ordered). Both modes are strictly increasing per
// (business, sub key) across the cluster in real time; they differ in what
// a crash of the shard's owner costs.
type OrderedMode int8

// Ordered modes.
const (
	// OrderedGapless (the default): every answer is durable before it is
	// sent; a crash loses nothing, and there is no gap unless a request
	// fails. Request ids are stored durably, in the same group commit.
	OrderedGapless OrderedMode = 0
	// OrderedCached: the owner reserves a few hundred milliseconds of the
	// key's traffic ahead and answers from memory; a crash of the owner
	// leaves a gap of at most one reservation per key. Request ids live
	// in the owner's memory only: a retry that reaches a new owner after
	// a failover gets a fresh range (a gap, never a duplicate).
	OrderedCached OrderedMode = 1
)

// String returns the name used in config, CLI and metrics.
func (m OrderedMode) String() string {
	switch m {
	case OrderedGapless:
		return "gapless"
	case OrderedCached:
		return "cached"
	}
	return "unknown"
}

// ParseOrderedMode reads "gapless" (or empty) or "cached".
func ParseOrderedMode(s string) (OrderedMode, error) {
	switch s {
	case "gapless", "":
		return OrderedGapless, nil
	case "cached":
		return OrderedCached, nil
	}
	return 0, fmt.Errorf("%w: ordered_mode %q: want gapless or cached", ErrInvalid, s)
}

// Valid reports whether m is a known mode.
func (m OrderedMode) Valid() bool { return m == OrderedGapless || m == OrderedCached }
