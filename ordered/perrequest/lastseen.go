package perrequest

import (
	"container/list"
	"hash/maphash"
	"sync"
)

// lruShards spreads the last-seen map over independently locked shards, so
// concurrent ORDERED requests for different keys rarely share a lock.
const lruShards = 16

// lastSeen remembers, per key, the highest number received from the store,
// for the most recently used keys only: memory stays bounded however many
// sub keys clients invent. Forgetting a key only weakens the regression
// guard for that key; it never refuses a good range.
type lastSeen struct {
	seed   maphash.Seed
	shards [lruShards]lruShard
}

type lruShard struct {
	mu    sync.Mutex
	cap   int
	items map[string]*list.Element
	order list.List // front: most recently used
}

type lruEntry struct {
	key  string
	last int64
}

func newLastSeen(capacity int) *lastSeen {
	s := &lastSeen{seed: maphash.MakeSeed()}
	per := max(1, (capacity+lruShards-1)/lruShards)
	for i := range s.shards {
		s.shards[i].cap = per
		s.shards[i].items = make(map[string]*list.Element)
	}
	return s
}

func (s *lastSeen) shard(key string) *lruShard {
	return &s.shards[maphash.String(s.seed, key)%lruShards]
}

// get returns the highest number seen for key (0 when unknown).
func (s *lastSeen) get(key string) int64 {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.items[key]; ok {
		sh.order.MoveToFront(e)
		return e.Value.(*lruEntry).last
	}
	return 0
}

// raise records last for key unless a higher number is already recorded,
// evicting the least recently used key when the shard is full.
func (s *lastSeen) raise(key string, last int64) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.items[key]; ok {
		ent := e.Value.(*lruEntry)
		ent.last = max(ent.last, last)
		sh.order.MoveToFront(e)
		return
	}
	if sh.order.Len() >= sh.cap {
		oldest := sh.order.Back()
		sh.order.Remove(oldest)
		delete(sh.items, oldest.Value.(*lruEntry).key)
	}
	sh.items[key] = sh.order.PushFront(&lruEntry{key: key, last: last})
}

// len returns the number of keys remembered.
func (s *lastSeen) len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.order.Len()
		sh.mu.Unlock()
	}
	return n
}

// each calls fn for every key remembered (shard by shard, each shard's
// lock held while it is walked, so fn must not call back into s).
func (s *lastSeen) each(fn func(key string, last int64)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for e := sh.order.Front(); e != nil; e = e.Next() {
			ent := e.Value.(*lruEntry)
			fn(ent.key, ent.last)
		}
		sh.mu.Unlock()
	}
}
