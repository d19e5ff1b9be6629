package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/worker"
)

// incarnationCheck is the node's cluster incarnation check (package
// cluster/incarnation): run by the shared ZooKeeper session at every
// connect and reconnect, before any guard writes, it tells every guard at
// once that ZooKeeper was wiped or restored from an older copy, and
// refuses a node of a re-created cluster. Its record is the worker's
// properties file (the same file as the slot cache: rpcPort and the
// advertised host name it); its witness is the database when the node
// runs with --mysql, which is what lets a new node that starts first
// after a restore see it.
//
// The session opens before the store (the ZooKeeper business store needs
// it), so the database reaches the witness later (setStore); until then a
// check waits for it (a --mysql node must not pass its first check
// without the witness).
//
// Hook-up (server/main.go):
//
//	inc := newIncarnationCheck(cfg, rpcPort, zksession.ErrRefused, log)    // before openSession
//	zksession.Config{..., Check: func(ctx context.Context, c zksession.ZK) (bool, string, error) { return inc.Check(ctx, c) }}
//	inc.setStore(store)                                                    // right after openStore
//	stop := inc.touchEvery(cfg.Heartbeat, func() (incarnation.ZK, bool) { return zs.Conn(), zs.View().Has }, log)
//	closers = append(closers, stop)                                        // after the session is opened
type incarnationCheck struct {
	*incarnation.Checker
	witness *lateWitness // nil without --mysql
}

// newIncarnationCheck builds the check; refused is wrapped into its
// permanent refusals (zksession.ErrRefused).
func newIncarnationCheck(cfg Config, rpcPort int, refused error, log *zap.Logger) *incarnationCheck {
	propsDir := cfg.PropertiesDir
	if propsDir == "" {
		propsDir = cfg.DataDir
	}
	host := advertiseHost(cfg)
	c := &incarnationCheck{}
	var witness incarnation.Witness
	if cfg.MySQL != "" {
		c.witness = &lateWitness{cluster: cfg.Cluster, ready: make(chan struct{})}
		witness = c.witness
	}
	c.Checker = incarnation.NewChecker(incarnation.Config{
		Root: cfg.ZKRoot, Cluster: cfg.Cluster,
		NodeKey: fmt.Sprintf("idgen:%d:%s", rpcPort, host),
		Record:  worker.IncarnationRecord(propsDir, "idgen", rpcPort, host, cfg.Cluster),
		Witness: witness,
		ACL:     worker.ClusterACL(cfg.ZKAuth),
		Refused: refused,
		Logger:  log.Named("incarnation"),
	})
	return c
}

// setStore gives the witness the node's store once it is open (a store
// that is not MySQL: no witness). Later calls are ignored.
func (c *incarnationCheck) setStore(store segment.Store) {
	if c.witness == nil {
		return
	}
	c.witness.once.Do(func() {
		c.witness.ms, _ = store.(*mysqlstore.Store)
		close(c.witness.ready)
	})
}

// lateWitness is the database as the incarnation's witness
// (cluster_binding, schema 10), given once the store is open.
type lateWitness struct {
	cluster string
	once    sync.Once
	ready   chan struct{}
	ms      *mysqlstore.Store // nil: the store is not MySQL
}

func (w *lateWitness) Load(ctx context.Context) (incarnation.WitnessState, error) {
	select {
	case <-w.ready:
	case <-ctx.Done():
		return incarnation.WitnessState{}, fmt.Errorf("waiting for the database to open: %w", ctx.Err())
	}
	if w.ms == nil {
		return incarnation.WitnessState{}, nil
	}
	id, n, bound, err := w.ms.ZKIncarnation(ctx, w.cluster)
	return incarnation.WitnessState{Bound: bound, ID: id, Counter: n}, err
}

func (w *lateWitness) Raise(ctx context.Context, id string, n int64) error {
	select {
	case <-w.ready:
	default:
		return nil
	}
	if w.ms == nil {
		return nil
	}
	return w.ms.RaiseZKIncarnation(ctx, w.cluster, id, n)
}

// touchEvery touches the incarnation (Checker.Touch: bump the marker's
// counter, raise the witness) every interval while the session is usable,
// until the returned stop is called. The check runs at (re)connects only;
// without touches, a ZooKeeper restored from a copy taken after every
// node's last (re)connect looks current to a new node, although the
// running nodes wrote marks and claims since (the fault scenario
// zk-restore-fresh-first: copy 16 s into the nodes' sessions, the fresh
// node took a slot whose restored mark was older than what its holder
// still issued). With a touch every heartbeat, a copy taken more than an
// interval before the nodes were cut off holds a counter below the
// database's, and the new node sees the restore. conn returns the
// session's handle and whether the session is usable.
func (c *incarnationCheck) touchEvery(every time.Duration, conn func() (incarnation.ZK, bool), log *zap.Logger) (stop func()) {
	if every <= 0 {
		every = 3 * time.Second // the default heartbeat
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			zk, ok := conn()
			if !ok {
				continue
			}
			tctx, tcancel := context.WithTimeout(ctx, every)
			lost, why, err := c.Touch(tctx, zk)
			tcancel()
			switch {
			case err != nil:
				log.Debug("touching the cluster incarnation failed; retried at the next heartbeat", zap.Error(err))
			case lost:
				// Recorded in the marker and the meta by Touch; the guards of
				// this node learn it at the session's next check, which
				// reports it again.
				log.Error("the cluster incarnation shows ZooKeeper lost state; this node's guards apply the restore rule at the session's next check", zap.String("reason", why))
			}
		}
	}()
	return func() { cancel(); <-done }
}
