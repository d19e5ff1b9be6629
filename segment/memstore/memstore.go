// Package memstore is an in-memory segment.Store with fault injection, for
// tests: processors use it to rehearse store outages (FailNext), slow or
// hanging stores (Block) and a store that went backwards (SetMaxID,
// SetOrderedMax), none of which a real database does on demand.
//
// It keeps the Store contract (it passes storetest) but nothing survives
// the process, so it is not for production use.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idgen/idgen/segment"
)

// ErrInjected is returned by calls failed with FailNext(n, nil).
var ErrInjected = errors.New("memstore: injected failure")

type orderedKey struct{ biz, subKey string }

type requestKey struct{ biz, scope, id string }

type request struct {
	subKey string
	count  int64
	r      segment.Range
}

// Store is the in-memory segment.Store. The zero value is not usable; call
// New.
type Store struct {
	mu       sync.Mutex
	biz      map[string]segment.Biz
	maxID    map[string]int64
	ordered  map[orderedKey]int64
	requests map[requestKey]request
	closed   bool

	faults faults

	segmentCalls atomic.Int64
	orderedCalls atomic.Int64
	bizCalls     atomic.Int64
}

var (
	_ segment.Store          = (*Store)(nil)
	_ segment.ReplayReporter = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	return &Store{
		biz:      make(map[string]segment.Biz),
		maxID:    make(map[string]int64),
		ordered:  make(map[orderedKey]int64),
		requests: make(map[requestKey]request),
	}
}

// SegmentCalls returns how many times ReserveSegment was called (failed
// and blocked calls included).
func (s *Store) SegmentCalls() int64 { return s.segmentCalls.Load() }

// OrderedCalls returns how many times ReserveOrdered(Replay) was called.
func (s *Store) OrderedCalls() int64 { return s.orderedCalls.Load() }

// BizCalls returns how many times a business method (Create, Update, Get,
// List) was called.
func (s *Store) BizCalls() int64 { return s.bizCalls.Load() }

// SetMaxID sets the business's UNORDERED counter (the last reserved
// number), backwards or forwards, as a failover to a lagging replica would.
func (s *Store) SetMaxID(biz string, maxID int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.biz[biz]; !ok {
		return fmt.Errorf("memstore: biz %q: %w", biz, segment.ErrUnknownBiz)
	}
	s.maxID[biz] = maxID
	return nil
}

// SetOrderedMax sets the ORDERED counter of (biz, subKey), creating it.
func (s *Store) SetOrderedMax(biz, subKey string, maxID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ordered[orderedKey{biz, subKey}] = maxID
}

// ReserveSegment implements segment.Store.
func (s *Store) ReserveSegment(ctx context.Context, biz string, step int64) (segment.Range, error) {
	s.segmentCalls.Add(1)
	if err := s.faults.enter(ctx); err != nil {
		return segment.Range{}, err
	}
	if err := segment.ValidateStep(step); err != nil {
		return segment.Range{}, fmt.Errorf("memstore: biz %q: %w", biz, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return segment.Range{}, err
	}
	if _, ok := s.biz[biz]; !ok {
		return segment.Range{}, fmt.Errorf("memstore: reserve segment: biz %q: %w", biz, segment.ErrUnknownBiz)
	}
	old := s.maxID[biz]
	if old > math.MaxInt64-step {
		return segment.Range{}, fmt.Errorf("memstore: biz %q: %w", biz, segment.ErrExhausted)
	}
	s.maxID[biz] = old + step
	return segment.Range{First: old + 1, Last: old + step}, nil
}

// ReserveOrdered implements segment.Store.
func (s *Store) ReserveOrdered(ctx context.Context, req segment.OrderedRequest) (segment.Range, error) {
	r, err := s.ReserveOrderedReplay(ctx, req)
	return r.Range, err
}

// ReserveOrderedReplay implements segment.ReplayReporter. Request ids never
// expire here: tests do not run for a day.
func (s *Store) ReserveOrderedReplay(ctx context.Context, req segment.OrderedRequest) (segment.Reservation, error) {
	s.orderedCalls.Add(1)
	if err := s.faults.enter(ctx); err != nil {
		return segment.Reservation{}, err
	}
	req, err := segment.NormalizeOrderedRequest(req)
	if err != nil {
		return segment.Reservation{}, fmt.Errorf("memstore: reserve ordered: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return segment.Reservation{}, err
	}
	if _, ok := s.biz[req.Biz]; !ok {
		return segment.Reservation{}, fmt.Errorf("memstore: reserve ordered: biz %q: %w", req.Biz, segment.ErrUnknownBiz)
	}
	rk := requestKey{req.Biz, req.RequestScope, req.RequestID}
	if req.RequestID != "" {
		if prev, ok := s.requests[rk]; ok {
			if prev.subKey != req.SubKey || prev.count != req.Count {
				return segment.Reservation{}, fmt.Errorf("memstore: biz %q: %w", req.Biz, segment.RequestMismatch())
			}
			return segment.Reservation{Range: prev.r, Replayed: true}, nil
		}
	}
	k := orderedKey{req.Biz, req.SubKey}
	old, ok := s.ordered[k]
	if !ok {
		old = req.StartNum - 1
	}
	raised := old < req.Above
	old = max(old, req.Above)
	if old > math.MaxInt64-req.Count {
		return segment.Reservation{}, fmt.Errorf("memstore: biz %q sub key %q: %w", req.Biz, req.SubKey, segment.ErrExhausted)
	}
	if req.Fence != nil {
		if err := req.Fence(); err != nil {
			return segment.Reservation{}, fmt.Errorf("memstore: biz %q sub key %q: %w", req.Biz, req.SubKey, err)
		}
	}
	s.ordered[k] = old + req.Count
	r := segment.Range{First: old + 1, Last: old + req.Count}
	if req.RequestID != "" {
		s.requests[rk] = request{subKey: req.SubKey, count: req.Count, r: r}
	}
	return segment.Reservation{Range: r, Raised: raised}, nil
}

// CreateBiz implements segment.Store.
func (s *Store) CreateBiz(ctx context.Context, b segment.Biz) (segment.Biz, error) {
	s.bizCalls.Add(1)
	if err := s.faults.enter(ctx); err != nil {
		return segment.Biz{}, err
	}
	b, err := segment.NormalizeBiz(b)
	if err != nil {
		return segment.Biz{}, fmt.Errorf("memstore: create biz: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return segment.Biz{}, err
	}
	if _, ok := s.biz[b.Name]; ok {
		return segment.Biz{}, fmt.Errorf("memstore: create biz %q: %w", b.Name, segment.ErrBizExists)
	}
	now := time.Now().UTC()
	b.CreatedAt, b.UpdatedAt = now, now
	s.biz[b.Name] = b
	s.maxID[b.Name] = b.StartNum - 1
	return clone(b), nil
}

// UpdateBiz implements segment.Store.
func (s *Store) UpdateBiz(ctx context.Context, name string, u segment.BizUpdate) (segment.Biz, error) {
	s.bizCalls.Add(1)
	if err := s.faults.enter(ctx); err != nil {
		return segment.Biz{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return segment.Biz{}, err
	}
	b, ok := s.biz[name]
	if !ok {
		return segment.Biz{}, fmt.Errorf("memstore: update biz %q: %w", name, segment.ErrUnknownBiz)
	}
	b, err := segment.ApplyBizUpdate(b, u, time.Now())
	if err != nil {
		return segment.Biz{}, fmt.Errorf("memstore: update biz: %w", err)
	}
	s.biz[name] = b
	return clone(b), nil
}

// GetBiz implements segment.Store.
func (s *Store) GetBiz(ctx context.Context, name string) (segment.Biz, error) {
	s.bizCalls.Add(1)
	if err := s.faults.enter(ctx); err != nil {
		return segment.Biz{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return segment.Biz{}, err
	}
	b, ok := s.biz[name]
	if !ok {
		return segment.Biz{}, fmt.Errorf("memstore: get biz %q: %w", name, segment.ErrUnknownBiz)
	}
	return clone(b), nil
}

// ListBiz implements segment.Store; businesses are sorted by name.
func (s *Store) ListBiz(ctx context.Context) ([]segment.Biz, error) {
	s.bizCalls.Add(1)
	if err := s.faults.enter(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	out := make([]segment.Biz, 0, len(s.biz))
	for _, b := range s.biz {
		out = append(out, clone(b))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Close implements segment.Store; later calls fail. It also releases
// blocked calls.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.faults.releaseAll()
	return nil
}

// clone returns b sharing no memory with the stored copy. A real store
// hands out decoded copies; without this, a caller changing a returned
// token hash, key or plugin list would change this store's state, and
// tests would pass here that fail against MySQL.
func clone(b segment.Biz) segment.Biz {
	b.Plugins = slices.Clone(b.Plugins)
	b.Channels = slices.Clone(b.Channels)
	b.Key = slices.Clone(b.Key)
	if b.Tokens != nil {
		b.Tokens = slices.Clone(b.Tokens)
		for i := range b.Tokens {
			b.Tokens[i].Hash = slices.Clone(b.Tokens[i].Hash)
		}
	}
	return b
}

func (s *Store) usable() error {
	if s.closed {
		return errors.New("memstore: store is closed")
	}
	return nil
}

var _ segment.Raiser = (*Store)(nil)

// RaiseSegment implements segment.Raiser.
func (s *Store) RaiseSegment(ctx context.Context, biz string, atLeast int64) error {
	if err := s.faults.enter(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.biz[biz]; !ok {
		return fmt.Errorf("memstore: raise segment: biz %q: %w", biz, segment.ErrUnknownBiz)
	}
	s.maxID[biz] = max(s.maxID[biz], atLeast)
	return nil
}

// RaiseOrdered implements segment.Raiser.
func (s *Store) RaiseOrdered(ctx context.Context, marks []segment.OrderedMark) error {
	if err := s.faults.enter(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range marks {
		k := orderedKey{m.Biz, m.SubKey}
		s.ordered[k] = max(s.ordered[k], m.Last)
	}
	return nil
}
