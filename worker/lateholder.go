package worker

import "sync"

// LateHolder stands in for the issuer while the lease starts: in cluster
// mode the lease must connect (and may acquire a slot) before the
// cluster's created_ms, and so the segment floor the issuer needs, is
// known. It records what the lease reported and replays it when the
// issuer attaches; after that it passes every call straight on. The
// server and the simulator both use it, so the simulator's nodes start
// exactly as the server's do.
//
// The zero value is ready to use.
type LateHolder struct {
	// Fault, if set, rewrites every slot the lease reports before it is
	// recorded or handed on. It is the negative controls' hook
	// (IDGEN_FAULT_IGNORE_NOT_BEFORE, IDGEN_FAULT_IGNORE_RESTORE). The
	// server passes its faultSlot, which reads those switches in
	// faultinject builds only and returns the slot unchanged otherwise
	// (server/holder_*.go); the simulator passes the function its
	// Controls table draws (sim/faults.go).
	Fault func(Slot) Slot

	mu     sync.Mutex
	target Holder
	slot   *Slot
	hw     int64
	fenced error
}

var _ Holder = (*LateHolder)(nil)

// Attach hands the holder its target: the slot the lease reported so far
// (with the highest mark it was extended to) and a fence that came after
// it are replayed, in that order, and every later call goes to t.
func (h *LateHolder) Attach(t Holder) {
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

// Acquired implements Holder.
func (h *LateHolder) Acquired(s Slot) {
	if h.Fault != nil {
		s = h.Fault(s)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil {
		h.target.Acquired(s)
		return
	}
	h.slot, h.hw, h.fenced = &s, s.HighWater, nil
}

// Extended implements Holder.
func (h *LateHolder) Extended(hw int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil {
		h.target.Extended(hw)
		return
	}
	h.hw = max(h.hw, hw)
}

// Fenced implements Holder: before the target attaches, a fence forgets
// the recorded slot, so Attach replays only the fence.
func (h *LateHolder) Fenced(reason error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil {
		h.target.Fenced(reason)
		return
	}
	h.slot, h.fenced = nil, reason
}

// LastUsed implements Holder: 0 until the target attaches, since nothing
// is issued before.
func (h *LateHolder) LastUsed() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil {
		return h.target.LastUsed()
	}
	return 0
}
