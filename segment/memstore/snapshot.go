package memstore

import (
	"maps"

	"github.com/idgen/idgen/segment"
)

// Snapshot is a copy of the store's data (businesses, UNORDERED counters,
// ORDERED rows and request ids), as an asynchronous replica holds it at
// some moment.
type Snapshot struct {
	biz      map[string]segment.Biz
	maxID    map[string]int64
	ordered  map[orderedKey]int64
	requests map[requestKey]request
}

// Snapshot copies the store's data.
func (s *Store) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &Snapshot{biz: map[string]segment.Biz{}, maxID: maps.Clone(s.maxID), ordered: maps.Clone(s.ordered), requests: maps.Clone(s.requests)}
	for k, b := range s.biz {
		snap.biz[k] = clone(b)
	}
	return snap
}

// Restore replaces the store's data by snap: a lossy failover to a replica
// that had received only what snap holds. Everything written since is
// gone. The cluster simulator (package sim) models a lossy MySQL failover
// with it.
func (s *Store) Restore(snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.biz = make(map[string]segment.Biz, len(snap.biz))
	for k, b := range snap.biz {
		s.biz[k] = clone(b)
	}
	s.maxID, s.ordered, s.requests = maps.Clone(snap.maxID), maps.Clone(snap.ordered), maps.Clone(snap.requests)
}
