// Package snowflake generates 64-bit, time-ordered IDs:
//
//	+---+------------------------------+-----------------+--------------+
//	| 0 | 41 bits: ms since the epoch  | 10 bits: worker | 12 bits: seq |
//	+---+------------------------------+-----------------+--------------+
//	                                    \_ idc (idc_bits) + node (node_bits)
//
// With the default epoch (2020-01-01T00:00:00Z) the 41 time bits last until
// 2089-09-06. One worker issues at most 4096 IDs per millisecond; a batch that
// needs more moves on to the next millisecond. The worker field is
// idc<<node_bits | node, with the split (default 2+8 = 4 IDCs x 256 nodes)
// fixed cluster-wide.
//
// The generator never issues a timestamp lower than one it already used
// (see clock.Guard), never one at or below the slot's NotBefore (what the
// slot's previous holders may have used) and never one above the slot's
// current high-water mark (what has been recorded durably as "this slot has
// not gone past here").
package snowflake

import (
	"errors"
	"fmt"
	"time"
)

// Bit widths of the layout.
const (
	TimeBits     = 41
	WorkerBits   = 10
	SequenceBits = 12
	MaxSequence  = 1<<SequenceBits - 1
	maxMillis    = 1<<TimeBits - 1
)

// DefaultEpoch is the cluster epoch used when none is configured.
var DefaultEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// Default bit split of the 10 worker bits.
const (
	DefaultIDCBits  = 2
	DefaultNodeBits = 8
)

// ErrInvalid reports a bad layout, configuration or ID.
var ErrInvalid = errors.New("invalid snowflake setting")

// Layout is the cluster-wide shape of an ID. The zero value means the
// defaults; call Normalize before use.
type Layout struct {
	Epoch    time.Time
	IDCBits  int
	NodeBits int
}

// Normalize returns l with zero fields replaced by defaults.
func (l Layout) Normalize() Layout {
	if l.Epoch.IsZero() {
		l.Epoch = DefaultEpoch
	}
	if l.IDCBits == 0 && l.NodeBits == 0 {
		l.IDCBits, l.NodeBits = DefaultIDCBits, DefaultNodeBits
	}
	return l
}

// Validate checks a normalized layout.
func (l Layout) Validate() error {
	if l.IDCBits < 0 || l.NodeBits < 1 || l.IDCBits+l.NodeBits != WorkerBits {
		return fmt.Errorf("%w: idc_bits (%d) + node_bits (%d) must be %d, node_bits >= 1", ErrInvalid, l.IDCBits, l.NodeBits, WorkerBits)
	}
	if l.Epoch.After(time.Now().Add(24 * time.Hour)) {
		return fmt.Errorf("%w: epoch %s is in the future", ErrInvalid, l.Epoch.Format(time.RFC3339))
	}
	return nil
}

// EpochMs returns the epoch as Unix milliseconds.
func (l Layout) EpochMs() int64 { return l.Epoch.UnixMilli() }

// MaxIDC and MaxNode are the largest idc and node numbers of the layout.
func (l Layout) MaxIDC() int  { return 1<<l.IDCBits - 1 }
func (l Layout) MaxNode() int { return 1<<l.NodeBits - 1 }

// Worker returns the worker field for (idc, node).
func (l Layout) Worker(idc, node int) int { return idc<<l.NodeBits | node }

// Floor returns the smallest snowflake ID a cluster created at createdMs
// (Unix ms) can issue. Segment IDs that serve as snowflake fallback stay
// strictly below it, so the two spaces are disjoint by construction.
func (l Layout) Floor(createdMs int64) int64 {
	d := createdMs - l.EpochMs()
	if d < 0 {
		d = 0
	}
	return d << (WorkerBits + SequenceBits)
}

// Compose builds an ID from Unix milliseconds, worker and sequence.
func (l Layout) Compose(unixMs int64, worker, seq int) int64 {
	return (unixMs-l.EpochMs())<<(WorkerBits+SequenceBits) | int64(worker)<<SequenceBits | int64(seq)
}

// Parts is a decoded snowflake ID.
type Parts struct {
	ID       int64
	Time     time.Time // UTC, millisecond precision
	UnixMs   int64
	IDC      int
	Node     int
	Worker   int
	Sequence int
}

// Parse decodes id with layout l.
func (l Layout) Parse(id int64) (Parts, error) {
	if id <= 0 {
		return Parts{}, fmt.Errorf("%w: id %d: snowflake IDs are positive", ErrInvalid, id)
	}
	ms := id>>(WorkerBits+SequenceBits) + l.EpochMs()
	worker := int(id>>SequenceBits) & (1<<WorkerBits - 1)
	return Parts{
		ID:       id,
		UnixMs:   ms,
		Time:     time.UnixMilli(ms).UTC(),
		IDC:      worker >> l.NodeBits,
		Node:     worker & (1<<l.NodeBits - 1),
		Worker:   worker,
		Sequence: int(id & MaxSequence),
	}, nil
}
