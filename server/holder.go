package server

import (
	"sync"

	"github.com/idgen/idgen/worker"
)

// lateHolder stands in for the issuer while the worker lease starts: in
// cluster mode the lease must connect (and may acquire a slot) before the
// cluster's created_ms, and so the segment floor the issuer needs, is known.
// It records what the lease reported and replays it when the issuer attaches.
type lateHolder struct {
	mu     sync.Mutex
	target worker.Holder
	slot   *worker.Slot
	hw     int64
	fenced error
}

var _ worker.Holder = (*lateHolder)(nil)

func (h *lateHolder) attach(t worker.Holder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.target = t
	if h.slot != nil {
		s := *h.slot
		s.HighWater = max(s.HighWater, h.hw)
		t.Acquired(s)
	}
	if h.fenced != nil {
		t.Fenced(h.fenced)
	}
}

func (h *lateHolder) Acquired(s worker.Slot) {
	s = faultSlot(s) // faultinject builds only: IDGEN_FAULT_IGNORE_NOT_BEFORE (holder_faultinject.go)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil {
		h.target.Acquired(s)
		return
	}
	h.slot, h.hw, h.fenced = &s, s.HighWater, nil
}

func (h *lateHolder) Extended(hw int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil {
		h.target.Extended(hw)
		return
	}
	h.hw = max(h.hw, hw)
}

func (h *lateHolder) Fenced(reason error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil {
		h.target.Fenced(reason)
		return
	}
	h.slot, h.fenced = nil, reason
}

func (h *lateHolder) LastUsed() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil {
		return h.target.LastUsed()
	}
	return 0 // nothing is issued before the issuer attaches
}
