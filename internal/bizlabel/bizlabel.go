// Package bizlabel caps the number of Prometheus series that carry a
// business name. Every distinct label value is a series kept in memory by
// the node and by Prometheus for good, and business names come from callers
// (auto-creation, invented names): without a cap, a caller could grow every
// per-business metric without limit.
//
// A Cap hands out the business name itself for the first Max distinct
// businesses it sees and Other for every later one. The names kept are the
// first seen, not the busiest: the cap protects the node, and a deployment
// with more businesses than the cap raises it (--metrics-max-bizs).
package bizlabel

import (
	"sync"
	"sync/atomic"
)

// Other is the label of every business beyond the cap.
const Other = "_other"

// DefaultMax is the cap used when none is given.
const DefaultMax = 1000

// Cap maps business names to label values. It is safe for concurrent use;
// a name already seen costs one sync.Map read.
type Cap struct {
	max  int
	n    atomic.Int64
	mu   sync.Mutex // serializes admissions, so the cap is exact
	seen sync.Map   // name -> struct{}
}

// New returns a Cap keeping max distinct names (max < 1: DefaultMax).
func New(max int) *Cap {
	if max < 1 {
		max = DefaultMax
	}
	return &Cap{max: max}
}

// Max returns the cap.
func (c *Cap) Max() int { return c.max }

// Label returns name while it is one of the first Max names seen, Other
// otherwise.
func (c *Cap) Label(name string) string {
	if _, ok := c.seen.Load(name); ok {
		return name
	}
	if c.n.Load() >= int64(c.max) {
		return Other
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen.Load(name); ok {
		return name
	}
	if c.n.Load() >= int64(c.max) {
		return Other
	}
	c.seen.Store(name, struct{}{})
	c.n.Add(1)
	return name
}
