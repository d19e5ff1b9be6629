package segment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Defaults of the business cache.
const (
	// DefaultBizCacheTTL is how long a business is served from memory
	// before it is read again: a business created or changed on another
	// node is seen within about this long.
	DefaultBizCacheTTL = 2 * time.Second
	// bizFetchTimeout bounds one store read. It is detached from the
	// callers' contexts because the read is shared by all of them.
	bizFetchTimeout = 5 * time.Second
	// maxNegativeEntries bounds the remembered unknown names, so requests
	// for invented names cannot grow the cache without limit.
	maxNegativeEntries = 10_000
)

// BizCache keeps businesses in memory so the hot path does not read the
// store per request.
//
//   - A fresh entry is served from memory.
//   - A stale entry keeps being served while one background read refreshes
//     it; if the store is down the stale entry keeps serving and the next
//     read is tried a TTL later.
//   - A miss (or a stale "unknown business") reads the store, with
//     concurrent misses for one name sharing one read (singleflight).
//
// It is safe for concurrent use.
type BizCache struct {
	store Store
	ttl   time.Duration
	group singleflight.Group

	mu        sync.RWMutex
	entries   map[string]*bizEntry
	gen       map[string]uint64 // bumped by Invalidate: results of older reads are dropped
	negatives int
}

// bizEntry is immutable once filed.
type bizEntry struct {
	biz     Biz
	err     error     // non-nil (wrapping ErrUnknownBiz) for a negative entry
	checkAt time.Time // serve from memory until then
}

// NewBizCache returns a cache over store; ttl <= 0 means DefaultBizCacheTTL.
func NewBizCache(store Store, ttl time.Duration) *BizCache {
	if ttl <= 0 {
		ttl = DefaultBizCacheTTL
	}
	return &BizCache{store: store, ttl: ttl, entries: make(map[string]*bizEntry), gen: make(map[string]uint64)}
}

// Get returns the business called name. Errors wrap ErrInvalid (bad name),
// ErrUnknownBiz, or ErrUnavailable (store down and nothing cached, or ctx
// ended first).
func (c *BizCache) Get(ctx context.Context, name string) (Biz, error) {
	if err := ValidateBizName(name); err != nil {
		return Biz{}, err
	}
	c.mu.RLock()
	e := c.entries[name]
	c.mu.RUnlock()
	now := time.Now()
	if e != nil {
		if now.Before(e.checkAt) {
			return e.biz, e.err
		}
		if e.err == nil {
			c.group.DoChan(name, func() (any, error) { return c.fetch(name) })
			return e.biz, nil
		}
	}
	ch := c.group.DoChan(name, func() (any, error) { return c.fetch(name) })
	select {
	case res := <-ch:
		if res.Err != nil {
			return Biz{}, res.Err
		}
		return res.Val.(Biz), nil
	case <-ctx.Done():
		return Biz{}, fmt.Errorf("segment: get biz %q: %w: %w", name, ErrUnavailable, ctx.Err())
	}
}

// Invalidate drops name, so the next Get reads the store. Call it after
// creating or updating a business through this node.
func (c *BizCache) Invalidate(name string) {
	c.mu.Lock()
	if e, ok := c.entries[name]; ok {
		if e.err != nil {
			c.negatives--
		}
		delete(c.entries, name)
	}
	c.gen[name]++
	c.mu.Unlock()
	c.group.Forget(name)
}

// fetch reads name from the store and files the result.
func (c *BizCache) fetch(name string) (any, error) {
	c.mu.RLock()
	gen := c.gen[name]
	e := c.entries[name]
	c.mu.RUnlock()
	if e != nil && time.Now().Before(e.checkAt) {
		// A read that finished just before this one started already
		// answered: callers that missed it by a hair do not read again.
		return e.biz, e.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), bizFetchTimeout)
	defer cancel()
	b, err := c.store.GetBiz(ctx, name)
	now := time.Now()

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen[name] != gen {
		// Invalidated meanwhile: this answer may predate the change.
		// Hand it to the callers already waiting, but do not keep it.
		return b, err
	}
	old := c.entries[name]
	switch {
	case err == nil:
		c.put(name, &bizEntry{biz: b, checkAt: now.Add(c.ttl)})
		return b, nil
	case errors.Is(err, ErrUnknownBiz):
		c.put(name, &bizEntry{err: err, checkAt: now.Add(c.ttl)})
		return Biz{}, err
	case errors.Is(err, ErrInvalid):
		return Biz{}, err
	case old != nil && old.err == nil:
		// Store down: keep serving the stale entry, try again a TTL later.
		// Entries are replaced, never modified, so readers need no lock.
		c.entries[name] = &bizEntry{biz: old.biz, checkAt: now.Add(c.ttl)}
		return old.biz, nil
	}
	return Biz{}, fmt.Errorf("segment: get biz %q: %w: %w", name, ErrUnavailable, err)
}

// put files e under name (c.mu held), keeping negative entries bounded.
func (c *BizCache) put(name string, e *bizEntry) {
	if old, ok := c.entries[name]; ok && old.err != nil {
		c.negatives--
	}
	if e.err != nil {
		if c.negatives >= maxNegativeEntries {
			c.sweepNegatives(time.Now())
		}
		if c.negatives >= maxNegativeEntries {
			delete(c.entries, name)
			return
		}
		c.negatives++
	}
	c.entries[name] = e
}

// sweepNegatives drops expired negative entries (c.mu held).
func (c *BizCache) sweepNegatives(now time.Time) {
	for name, e := range c.entries {
		if e.err != nil && !now.Before(e.checkAt) {
			delete(c.entries, name)
			c.negatives--
		}
	}
}
