package server

import (
	"context"
	"fmt"
	"sync"

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
// Hook-up (server/main.go): the check is the session's Config.Check
// (openSession), the store is given right after openStore, the session
// is touched every heartbeat (Checker.TouchEvery) and after every worker slot
// claim (Checker.AfterClaim, worker.Config.AfterClaim). A loss a touch sees is
// noted on the session (zksession.Session.NoteRestore), so every guard
// applies the restore rule at once, as for a loss the check finds.
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
