package clock

import (
	"sync/atomic"
	"time"
)

// Offset is a Clock shifted by an adjustable offset. The server wires it in
// only in builds with the faultinject tag, so end-to-end tests can move a
// running node's clock backwards and forwards; normal builds use Base
// directly.
type Offset struct {
	Base   Clock
	offset atomic.Int64 // nanoseconds
}

var _ Clock = (*Offset)(nil)

// Now returns Base.Now() plus the current offset.
func (o *Offset) Now() time.Time {
	return o.Base.Now().Add(time.Duration(o.offset.Load()))
}

// Set replaces the offset.
func (o *Offset) Set(d time.Duration) { o.offset.Store(int64(d)) }

// Get returns the current offset.
func (o *Offset) Get() time.Duration { return time.Duration(o.offset.Load()) }
