package server

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/worker"
)

// newIncarnationCheck builds the node's cluster incarnation check
// (package cluster/incarnation): run by the shared ZooKeeper session at
// every connect and reconnect, before any guard writes, it tells every
// guard at once that ZooKeeper was wiped or restored from an older copy,
// and refuses a node of a re-created cluster. Its record is the worker's
// properties file (the same file as the slot cache, rpcPort and the
// advertised host name it); its witness is the database when the node
// runs with --mysql, which is what lets a new node that starts first
// after a restore see it. refused is wrapped into its permanent refusals
// (zksession.ErrRefused).
//
// Hook-up (server/main.go, where the session is opened):
//
//	chk := newIncarnationCheck(cfg, rpcPort, store, zksession.ErrRefused, log)
//	zksession.Config{..., Check: func(ctx context.Context, c zksession.ZK) (bool, string, error) { return chk.Check(ctx, c) }}
//
// The store must be open before the session (the witness reads it).
func newIncarnationCheck(cfg Config, rpcPort int, store segment.Store, refused error, log *zap.Logger) *incarnation.Checker {
	propsDir := cfg.PropertiesDir
	if propsDir == "" {
		propsDir = cfg.DataDir
	}
	host := advertiseHost(cfg)
	var witness incarnation.Witness
	if ms, ok := store.(*mysqlstore.Store); ok {
		witness = mysqlWitness{ms: ms, cluster: cfg.Cluster}
	}
	return incarnation.NewChecker(incarnation.Config{
		Root: cfg.ZKRoot, Cluster: cfg.Cluster,
		NodeKey: fmt.Sprintf("idgen:%d:%s", rpcPort, host),
		Record:  worker.IncarnationRecord(propsDir, "idgen", rpcPort, host, cfg.Cluster),
		Witness: witness,
		ACL:     worker.ClusterACL(cfg.ZKAuth),
		Refused: refused,
		Logger:  log.Named("incarnation"),
	})
}

// mysqlWitness is the database as the incarnation's witness
// (cluster_binding, schema 10).
type mysqlWitness struct {
	ms      *mysqlstore.Store
	cluster string
}

func (w mysqlWitness) Load(ctx context.Context) (incarnation.WitnessState, error) {
	id, n, bound, err := w.ms.ZKIncarnation(ctx, w.cluster)
	return incarnation.WitnessState{Bound: bound, ID: id, Counter: n}, err
}

func (w mysqlWitness) Raise(ctx context.Context, id string, n int64) error {
	return w.ms.RaiseZKIncarnation(ctx, w.cluster, id, n)
}
