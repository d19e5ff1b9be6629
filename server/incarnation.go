package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/cluster/zksession"
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
// is touched every heartbeat (touchEvery) and after every worker slot
// claim (afterClaim, worker.Config.AfterClaim). A loss a touch sees is
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

// touchSession is what a touch needs of the node's ZooKeeper session
// (*zksession.Session).
type touchSession interface {
	Conn() zksession.ZK
	View() zksession.View
	NoteRestore(why string)
}

var _ touchSession = (*zksession.Session)(nil)

// touch touches the incarnation once on the session (Checker.Touch). A
// loss it sees is noted on the session, so every guard of the node
// applies the restore rule now (View.Restores grows), not at the next
// reconnect.
func (c *incarnationCheck) touch(ctx context.Context, zs touchSession) (lost bool, err error) {
	lost, why, err := c.Touch(ctx, zs.Conn())
	if err != nil || !lost {
		return false, err
	}
	zs.NoteRestore("seen by the incarnation touch: " + why)
	return true, nil
}

// afterClaim is worker.Config.AfterClaim: a touch right after each slot
// claim, before the slot serves. The heartbeat touch alone leaves a
// window: a claim made less than a heartbeat before a copy of ZooKeeper
// is taken, then restored, leaves no trace a new node can see. With this
// touch a copy without the claim is a copy without the bump, whose
// counter is below the database's. An error (the touch failed, or it saw
// a loss: the meta is marked restored, and the claim must be made again
// on it) keeps the slot from serving; the worker claims again.
func (c *incarnationCheck) afterClaim(zs touchSession) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if !zs.View().Has {
			return fmt.Errorf("the ZooKeeper session is not usable: cannot record the claim in the cluster incarnation")
		}
		lost, err := c.touch(ctx, zs)
		switch {
		case err != nil:
			return fmt.Errorf("touch the cluster incarnation: %w", err)
		case lost:
			return fmt.Errorf("the cluster incarnation shows ZooKeeper lost state right after the claim (%s): claim again after the restore mark", zs.View().RestoreWhy)
		}
		return nil
	}
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
// database's, and the new node sees the restore. Touches run only while
// the session is usable.
func (c *incarnationCheck) touchEvery(every time.Duration, zs touchSession, log *zap.Logger) (stop func()) {
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
			if !zs.View().Has {
				continue
			}
			tctx, tcancel := context.WithTimeout(ctx, every)
			_, err := c.touch(tctx, zs) // a loss is noted on the session (logged there, at error)
			tcancel()
			if err != nil {
				log.Debug("touching the cluster incarnation failed; retried at the next heartbeat", zap.Error(err))
			}
		}
	}()
	return func() { cancel(); <-done }
}
