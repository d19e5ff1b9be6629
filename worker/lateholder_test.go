package worker

import (
	"errors"
	"reflect"
	"testing"
)

// callLog is a Holder that records the calls it receives, in order.
type callLog struct {
	calls []string
	slots []Slot
	last  int64
}

func (c *callLog) Acquired(s Slot) {
	c.calls = append(c.calls, "acquired")
	c.slots = append(c.slots, s)
}
func (c *callLog) Extended(int64)  { c.calls = append(c.calls, "extended") }
func (c *callLog) Fenced(error)    { c.calls = append(c.calls, "fenced") }
func (c *callLog) LastUsed() int64 { return c.last }

// LateHolder replays what the lease reported before the issuer attached:
// the slot with the highest mark it was extended to, a fence after the
// slot alone (the slot forgotten), and a re-acquire after a fence as a
// slot again. After Attach every call passes straight on.
func TestLateHolderReplaysOnAttach(t *testing.T) {
	fence := errors.New("fenced")
	for _, tc := range []struct {
		name      string
		before    func(h *LateHolder)
		wantCalls []string
		wantSlots []Slot
	}{
		{"nothing", func(*LateHolder) {}, nil, nil},
		{"slot then extended", func(h *LateHolder) {
			h.Acquired(Slot{Worker: 2, NotBefore: 100, HighWater: 200})
			h.Extended(300)
			h.Extended(250) // a lower mark does not lower the replay
		}, []string{"acquired"}, []Slot{{Worker: 2, NotBefore: 100, HighWater: 300}}},
		{"slot then fenced", func(h *LateHolder) {
			h.Acquired(Slot{Worker: 2, NotBefore: 100, HighWater: 200})
			h.Fenced(fence)
		}, []string{"fenced"}, nil},
		{"fenced then slot", func(h *LateHolder) {
			h.Fenced(fence)
			h.Acquired(Slot{Worker: 5, NotBefore: 400, HighWater: 500})
		}, []string{"acquired"}, []Slot{{Worker: 5, NotBefore: 400, HighWater: 500}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &LateHolder{}
			tc.before(h)
			if got := h.LastUsed(); got != 0 {
				t.Fatalf("LastUsed before Attach = %d, want 0", got)
			}
			target := &callLog{last: 77}
			h.Attach(target)
			if !reflect.DeepEqual(target.calls, tc.wantCalls) || !reflect.DeepEqual(target.slots, tc.wantSlots) {
				t.Fatalf("replayed %v %+v, want %v %+v", target.calls, target.slots, tc.wantCalls, tc.wantSlots)
			}
			target.calls, target.slots = nil, nil
			h.Acquired(Slot{Worker: 9, HighWater: 900})
			h.Extended(1000)
			h.Fenced(fence)
			if want := []string{"acquired", "extended", "fenced"}; !reflect.DeepEqual(target.calls, want) {
				t.Fatalf("after Attach: %v, want %v", target.calls, want)
			}
			if got := h.LastUsed(); got != 77 {
				t.Fatalf("LastUsed after Attach = %d, want the target's 77", got)
			}
		})
	}
}

// Fault rewrites every slot, whether recorded before Attach or passed on
// after it (the negative controls' hook).
func TestLateHolderFaultRewritesEverySlot(t *testing.T) {
	h := &LateHolder{Fault: func(s Slot) Slot { s.NotBefore = 0; return s }}
	h.Acquired(Slot{Worker: 1, NotBefore: 100, HighWater: 200})
	target := &callLog{}
	h.Attach(target)
	h.Acquired(Slot{Worker: 1, NotBefore: 300, HighWater: 400})
	want := []Slot{{Worker: 1, HighWater: 200}, {Worker: 1, HighWater: 400}}
	if !reflect.DeepEqual(target.slots, want) {
		t.Fatalf("slots %+v, want %+v", target.slots, want)
	}
}
