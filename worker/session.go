package worker

import (
	"context"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// sessionView is what the lease knows about its ZooKeeper session.
type sessionView struct {
	// has is true only while the client is at zk.StateHasSession: a TCP
	// connection (StateConnected) is not yet a session.
	has bool
	// id is the session id seen at the last StateHasSession (0: never).
	id int64
	// lostAt is when the session was last seen lost (zero while has).
	lostAt time.Time
	// expired counts StateExpired events.
	expired uint64
	// closed: the client's event channel was closed (client closed).
	closed bool
	// refused counts handshakes refused in a row: a TCP connection that
	// ended before a session (see redial.go). Reset by a session.
	refused int
	// client counts the clients attached (1 for the first).
	client int
}

// sessionWatch reads a client's event channel in one goroutine that never
// blocks (the client drops events nobody reads, and a slow reader would
// see stale states) and keeps the latest view. Consumers take a snapshot
// and a channel that is closed at the next change; comparing snapshots
// (session id, expiry count) is robust to transitions they did not see.
type sessionWatch struct {
	mu      sync.Mutex
	conn    ZK // the client whose events are read now
	v       sessionView
	changed chan struct{}
	tcp     bool // connected (StateConnected) and no session or disconnect since
}

func watchSession(conn ZK, events <-chan zk.Event) *sessionWatch {
	w := &sessionWatch{changed: make(chan struct{})}
	w.v.lostAt = time.Now()
	w.attach(conn, events)
	return w
}

// attach makes conn's events the ones that count (a replaced client's
// later events are ignored) and starts reading them.
func (w *sessionWatch) attach(conn ZK, events <-chan zk.Event) {
	w.mu.Lock()
	w.conn = conn
	w.v.client++
	w.v.refused, w.tcp = 0, false
	if !w.v.has {
		// The new client gets its own time to connect before anyone
		// judges its lack of a session.
		w.v.lostAt = time.Now()
	}
	gen := w.v.client
	w.signal()
	w.mu.Unlock()
	go w.read(events, gen)
}

func (w *sessionWatch) read(events <-chan zk.Event, gen int) {
	for ev := range events {
		if ev.Type != zk.EventSession {
			continue
		}
		w.mu.Lock()
		if gen != w.v.client { // a replaced client: drain, ignore
			w.mu.Unlock()
			continue
		}
		switch ev.State {
		case zk.StateHasSession:
			w.v.has = true
			w.v.id = w.conn.SessionID()
			w.v.lostAt = time.Time{}
			w.v.refused, w.tcp = 0, false
		case zk.StateExpired:
			w.v.expired++
			w.lost()
		case zk.StateConnected:
			w.tcp = true
			if !w.v.has {
				w.mu.Unlock()
				continue
			}
			w.lost()
		case zk.StateConnecting:
			// Still without a session if it was lost; unchanged otherwise
			// (the client reports Connecting only after Disconnected).
			if !w.v.has {
				w.mu.Unlock()
				continue
			}
			w.lost()
		default: // Disconnected, AuthFailed, ...
			if w.tcp && !w.v.has {
				w.v.refused++ // the server closed the connection before a session
			}
			w.tcp = false
			w.lost()
		}
		w.signal()
		w.mu.Unlock()
	}
	w.mu.Lock()
	if gen == w.v.client {
		w.v.closed = true
		w.lost()
		w.signal()
	}
	w.mu.Unlock()
}

// lost records the loss of the session; w.mu is held.
func (w *sessionWatch) lost() {
	if w.v.has {
		w.v.has = false
		w.v.lostAt = time.Now()
	}
}

// signal wakes the consumers; w.mu is held.
func (w *sessionWatch) signal() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// view returns the current view and a channel closed at the next change.
func (w *sessionWatch) view() (sessionView, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.v, w.changed
}

// waitSession waits until the client has a session, for at most d.
func (w *sessionWatch) waitSession(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		v, ch := w.view()
		if v.has {
			return true
		}
		if v.closed {
			return false
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
