package worker

import (
	"context"
	"sync"

	"github.com/go-zookeeper/zk"
)

// reader is how listings read znodes: plainly, or leaving a watch.
type reader interface {
	children(path string) ([]string, *zk.Stat, error)
	get(path string) ([]byte, *zk.Stat, error)
}

type plainReader struct{ c ZK }

func (r plainReader) children(p string) ([]string, *zk.Stat, error) { return r.c.Children(p) }
func (r plainReader) get(p string) ([]byte, *zk.Stat, error)        { return r.c.Get(p) }

// watchReader reads znodes and leaves one watch per znode and kind: a
// znode already watched is read without a new watch, because every watch
// call registers another channel in the client that is only released when
// the watch fires. changed is signalled when any watch fires.
type watchReader struct {
	ctx     context.Context
	c       ZK
	changed chan struct{} // capacity 1: a pending change

	mu      sync.Mutex
	pending map[watchKey]bool
}

type watchKey struct {
	path     string
	children bool
}

func newWatchReader(ctx context.Context, c ZK) *watchReader {
	return &watchReader{ctx: ctx, c: c, changed: make(chan struct{}, 1), pending: map[watchKey]bool{}}
}

func (w *watchReader) children(p string) ([]string, *zk.Stat, error) {
	k := watchKey{p, true}
	if w.watched(k) {
		return w.c.Children(p)
	}
	kids, st, ch, err := w.c.ChildrenW(p)
	if err != nil {
		w.unwatch(k)
		return nil, nil, err
	}
	w.follow(k, ch)
	return kids, st, nil
}

func (w *watchReader) get(p string) ([]byte, *zk.Stat, error) {
	k := watchKey{p, false}
	if w.watched(k) {
		return w.c.Get(p)
	}
	b, st, ch, err := w.c.GetW(p)
	if err != nil {
		// A missing znode cannot be watched with GetW; its parent's
		// children watch reports its creation.
		w.unwatch(k)
		return nil, nil, err
	}
	w.follow(k, ch)
	return b, st, nil
}

// watched reports whether k has a live watch, and marks it as having one.
func (w *watchReader) watched(k watchKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending[k] {
		return true
	}
	w.pending[k] = true
	return false
}

func (w *watchReader) unwatch(k watchKey) {
	w.mu.Lock()
	delete(w.pending, k)
	w.mu.Unlock()
}

// follow waits for the watch on k to fire, then forgets it and signals.
func (w *watchReader) follow(k watchKey, ch <-chan zk.Event) {
	go func() {
		select {
		case <-ch:
		case <-w.ctx.Done():
			return
		}
		w.unwatch(k)
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}()
}

// drain clears a pending change signal before the next listing (the
// listing reads the current state anyway).
func (w *watchReader) drain() {
	select {
	case <-w.changed:
	default:
	}
}
