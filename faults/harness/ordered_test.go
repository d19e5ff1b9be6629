package harness

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestHold(t *testing.T) {
	h := NewHold()
	stop := make(chan struct{})
	var calls atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for h.enter(stop) {
			calls.Add(1)
			time.Sleep(5 * time.Millisecond)
			h.leave()
		}
	}()
	time.Sleep(30 * time.Millisecond)
	h.Pause()
	n := calls.Load()
	h.mu.Lock()
	active := h.active
	h.mu.Unlock()
	if active != 0 {
		t.Fatalf("Pause returned with %d calls in flight", active)
	}
	time.Sleep(30 * time.Millisecond)
	if got := calls.Load(); got != n {
		t.Fatalf("%d calls while held", got-n)
	}
	h.Resume()
	time.Sleep(30 * time.Millisecond)
	if calls.Load() == n {
		t.Fatal("no call after Resume")
	}
	h.Pause()
	close(stop)
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("a held caller did not see stop")
	}
}
