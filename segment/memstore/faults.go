package memstore

import (
	"context"
	"fmt"
	"sync"
)

// faults holds the injected failures. Every Store method except Close passes
// through enter first, so a fault hits whichever call comes next.
type faults struct {
	mu      sync.Mutex
	failN   int
	failErr error
	gate    chan struct{} // non-nil while blocked; closed on release
	waiting int           // calls currently held at the gate
}

// FailNext makes the next n calls fail with err (ErrInjected when err is
// nil). A later FailNext replaces an earlier one.
func (s *Store) FailNext(n int, err error) {
	if err == nil {
		err = ErrInjected
	}
	s.faults.mu.Lock()
	s.faults.failN, s.faults.failErr = n, err
	s.faults.mu.Unlock()
}

// Block holds every call from now on until release is called (or the call's
// context ends, which it returns as the error): a hanging database.
// release is idempotent.
func (s *Store) Block() (release func()) {
	f := &s.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate == nil {
		f.gate = make(chan struct{})
	}
	gate := f.gate
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.gate == gate {
			f.gate = nil
			close(gate)
		}
	}
}

// Blocked returns how many calls are waiting at a Block right now; tests
// poll it to know a background load has reached the store.
func (s *Store) Blocked() int {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.waiting
}

func (f *faults) releaseAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

// Enter applies the injected faults (Block, FailNext) to one call that a
// simulator embedding the Store makes on tables of its own (the simulated
// MySQL primary's ORDERED shard rows), so that a hanging or failing
// database hits those calls as it hits the Store's own.
func (s *Store) Enter(ctx context.Context) error { return s.faults.enter(ctx) }

// enter applies the injected faults to one call: wait at the gate, then
// consume one injected failure.
func (f *faults) enter(ctx context.Context) error {
	f.mu.Lock()
	gate := f.gate
	if gate != nil {
		f.waiting++
		f.mu.Unlock()
		var err error
		select {
		case <-gate:
		case <-ctx.Done():
			err = fmt.Errorf("memstore: blocked call abandoned: %w", ctx.Err())
		}
		f.mu.Lock()
		f.waiting--
		if err != nil {
			f.mu.Unlock()
			return err
		}
	}
	defer f.mu.Unlock()
	if f.failN > 0 {
		f.failN--
		return fmt.Errorf("memstore: %w", f.failErr)
	}
	return ctx.Err()
}
