package zkguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/segment"
)

// Server is what the barrier needs of the MySQL store.
type Server interface {
	// Server is the identity of the server behind the store's newest
	// connection ("" before the first).
	Server() string
	// Ping makes the store open a connection when its idle ones are
	// gone, so a server change is noticed.
	Ping(ctx context.Context) error
}

// serverRecord is /<root>/<cluster>/mysql/server.
type serverRecord struct {
	Server    string `json:"server"`
	Gen       int64  `json:"gen"`
	ChangedMs int64  `json:"changed_ms"`
	By        string `json:"by"`
}

// ackRecord is /<root>/<cluster>/mysql/nodes/<node>.
type ackRecord struct {
	Gen    int64  `json:"gen"`
	Server string `json:"server"`
	AtMs   int64  `json:"at_ms"`
}

// ErrBarrier wraps the refusal of ORDERED while the gate is closed.
var ErrBarrier = errors.New("ORDERED paused until every node raised the ORDERED rows it remembers on the cluster's MySQL server")

// Enter implements segment.Gate.
func (g *Guard) Enter() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		return 0, fmt.Errorf("%w: %w (%s)", segment.ErrUnavailable, ErrBarrier, g.why)
	}
	return g.token, nil
}

// WaitOpen waits until the gate is open or ctx ends, and reports whether
// it is open (the server waits for the first round at start, so a node
// that starts in a quiet cluster serves ORDERED as soon as it is ready).
func (g *Guard) WaitOpen(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := g.Enter(); err == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Check implements segment.Gate.
func (g *Guard) Check(token uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open || g.token != token {
		return fmt.Errorf("%w: %w", segment.ErrUnavailable, ErrBarrier)
	}
	return nil
}

// ServerChanged closes the gate at once (register it with the store's
// OnServerChange: it runs before the new connection serves a statement)
// and wakes the barrier.
func (g *Guard) ServerChanged(old, new string) {
	if g.cfg.Disabled {
		return
	}
	g.close("server changed from " + old + " to " + new)
}

func (g *Guard) close(why string) {
	g.mu.Lock()
	if g.open {
		g.open = false
		g.token++
		g.closedAt = time.Now()
		g.why = why
		g.log.Warn("ORDERED gate closed: "+why, zap.Uint64("token", g.token))
	}
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// StartBarrier runs the barrier until Close. The gate is closed until the
// first round finds every live node acknowledging the cluster's current
// server (or BarrierWait passed): a node that starts during another
// node's barrier waits with it. flush raises the ORDERED rows
// this node remembers on the store (segment.Ordered.Remembered into
// mysqlstore.Store.RaiseOrdered).
func (g *Guard) StartBarrier(store Server, flush func(ctx context.Context) error) {
	if g.cfg.Disabled {
		return
	}
	g.mu.Lock()
	g.started = true
	g.mu.Unlock()
	go g.barrierLoop(store, flush)
}

func (g *Guard) barrierLoop(store Server, flush func(ctx context.Context) error) {
	defer close(g.done)
	for {
		g.barrierStep(store, flush)
		// An open gate only watches for another node's server change (this
		// node's own connections report theirs at once): poll slowly.
		every := pollOpen
		g.mu.Lock()
		if !g.open {
			every = pollClosed
		}
		g.mu.Unlock()
		t := time.NewTimer(every)
		select {
		case <-g.stop:
			t.Stop()
			return
		case <-t.C:
		case <-g.kick:
			t.Stop()
		}
	}
}

// barrierStep is one round: agree on the server record, acknowledge its
// generation once the rows are raised, open the gate when everybody has.
func (g *Guard) barrierStep(store Server, flush func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.BarrierWait)
	defer cancel()
	g.recordPending(ctx)
	err := g.round(ctx, store, flush)
	g.mu.Lock()
	open, closedAt := g.open, g.closedAt
	g.mu.Unlock()
	if open {
		if err != nil && !errors.Is(err, segment.ErrUnavailable) {
			g.log.Warn("ORDERED barrier round failed", zap.Error(err))
		}
		return
	}
	if waited := time.Since(closedAt); waited >= g.cfg.BarrierWait {
		g.timeouts.Add(1)
		g.openGate()
		g.log.Error("ORDERED gate opened without every node's acknowledgement: keys remembered only by the silent nodes may repeat numbers",
			zap.Duration("waited", waited), zap.Error(err))
	}
}

func (g *Guard) openGate() {
	g.mu.Lock()
	g.open = true
	g.mu.Unlock()
}

// round returns nil when the gate may open (and opens it), an error saying
// what it waits for otherwise.
func (g *Guard) round(ctx context.Context, store Server, flush func(ctx context.Context) error) error {
	// A closed gate, or a record with a newer generation, needs the
	// server this node's connections reach now.
	cur := store.Server()
	var rec serverRecord
	recPath := path.Join(g.base, "mysql", "server")
	err := g.call(ctx, func() error {
		data, st, err := g.conn.Get(recPath)
		if errors.Is(err, zk.ErrNoNode) {
			if cur == "" {
				return nil
			}
			if err := g.ensure(path.Dir(recPath)); err != nil {
				return err
			}
			rec = serverRecord{Server: cur, Gen: 1, ChangedMs: time.Now().UnixMilli(), By: g.cfg.Self}
			b, _ := json.Marshal(rec)
			if _, err := g.conn.Create(recPath, b, 0, g.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
			return errRetry
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("zkguard: %s holds %q: %w", recPath, data, err)
		}
		if cur != "" && rec.Server != cur {
			// This node reaches another server than the record names: a
			// failover the record has not seen yet (or this node is the
			// one behind: then its connections fail and it retries).
			next := serverRecord{Server: cur, Gen: rec.Gen + 1, ChangedMs: time.Now().UnixMilli(), By: g.cfg.Self}
			b, _ := json.Marshal(next)
			if _, err := g.conn.Set(recPath, b, st.Version); err != nil && !errors.Is(err, zk.ErrBadVersion) {
				return err
			}
			g.log.Warn("MySQL server recorded for the cluster changed; every node raises the ORDERED rows it remembers",
				zap.String("old", rec.Server), zap.String("new", cur), zap.Int64("gen", next.Gen))
			return errRetry
		}
		return nil
	})
	if errors.Is(err, errRetry) {
		g.close("the cluster's MySQL server record changed")
		return err
	}
	if err != nil {
		return err
	}
	if rec.Gen == 0 {
		return errors.New("zkguard: no MySQL server known yet")
	}
	g.mu.Lock()
	acked := g.acked
	g.mu.Unlock()
	if rec.Gen > acked {
		if acked > 0 {
			g.close(fmt.Sprintf("generation %d of the cluster's MySQL server", rec.Gen))
		}
		// Reach the recorded server first: idle connections to a dead
		// one are replaced by a new connection, which reports its server.
		if err := store.Ping(ctx); err != nil {
			return fmt.Errorf("reach the MySQL server: %w", err)
		}
		if s := store.Server(); s != rec.Server {
			return fmt.Errorf("this node reaches MySQL server %s, the cluster's record names %s", s, rec.Server)
		}
		start := time.Now()
		if err := flush(ctx); err != nil {
			return fmt.Errorf("raise the remembered ORDERED rows: %w", err)
		}
		if acked > 0 {
			g.log.Info("ORDERED rows this node remembers raised on the new MySQL server",
				zap.String("server", rec.Server), zap.Int64("gen", rec.Gen), zap.Duration("took", time.Since(start)))
		}
		if err := g.ack(ctx, rec); err != nil {
			return err
		}
		g.mu.Lock()
		g.acked = rec.Gen
		g.mu.Unlock()
	} else if sid := g.conn.SessionID(); sid != g.ackSession {
		// A new session lost the ephemeral acknowledgement: write it again.
		if err := g.ack(ctx, rec); err != nil {
			return err
		}
	}
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open {
		return nil
	}
	if missing, err := g.unacked(ctx, rec.Gen); err != nil {
		return err
	} else if len(missing) > 0 {
		return fmt.Errorf("waiting for %s", strings.Join(missing, ", "))
	}
	g.complete.Add(1)
	g.openGate()
	g.mu.Lock()
	waited := time.Since(g.closedAt)
	g.mu.Unlock()
	g.log.Warn("ORDERED gate open again: every node raised the rows it remembers on the new MySQL server",
		zap.String("server", rec.Server), zap.Int64("gen", rec.Gen), zap.Duration("closed_for", waited))
	return nil
}

var errRetry = errors.New("server record changed")

// ack writes this node's acknowledgement (ephemeral), unless it is there,
// and remembers the session it was written in.
func (g *Guard) ack(ctx context.Context, rec serverRecord) error {
	p := path.Join(g.base, "mysql", "nodes", g.cfg.Self)
	b, _ := json.Marshal(ackRecord{Gen: rec.Gen, Server: rec.Server, AtMs: time.Now().UnixMilli()})
	sid := g.conn.SessionID()
	err := g.call(ctx, func() error {
		data, st, err := g.conn.Get(p)
		if errors.Is(err, zk.ErrNoNode) {
			if err := g.ensure(path.Dir(p)); err != nil {
				return err
			}
			_, err := g.conn.Create(p, b, zk.FlagEphemeral, g.acl)
			if errors.Is(err, zk.ErrNodeExists) {
				return errRetry
			}
			return err
		}
		if err != nil {
			return err
		}
		if st.EphemeralOwner != sid {
			// Left by this node's previous process (its session not
			// expired yet): it would vanish with that session and leave
			// this node out of the next barrier. Replace it with ours.
			if err := g.conn.Delete(p, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			return errRetry
		}
		var a ackRecord
		if json.Unmarshal(data, &a) == nil && a.Gen >= rec.Gen {
			return nil
		}
		_, err = g.conn.Set(p, b, st.Version)
		return err
	})
	if err == nil {
		g.ackSession = sid
	}
	return err
}

// unacked lists the live nodes that have not acknowledged gen.
func (g *Guard) unacked(ctx context.Context, gen int64) ([]string, error) {
	dir := path.Join(g.base, "mysql", "nodes")
	var missing []string
	err := g.call(ctx, func() error {
		kids, _, err := g.conn.Children(dir)
		if err != nil {
			return err
		}
		for _, k := range kids {
			data, _, err := g.conn.Get(path.Join(dir, k))
			if errors.Is(err, zk.ErrNoNode) {
				continue // gone: nothing it remembers can be served
			}
			if err != nil {
				return err
			}
			var a ackRecord
			if json.Unmarshal(data, &a) != nil || a.Gen < gen {
				missing = append(missing, k)
			}
		}
		return nil
	})
	return missing, err
}
