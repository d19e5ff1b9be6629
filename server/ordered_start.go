package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/ordered"
	orderedbolt "github.com/idgen/idgen/ordered/boltstore"
	"github.com/idgen/idgen/ordered/forward"
	orderedmysql "github.com/idgen/idgen/ordered/mysqlstore"
	"github.com/idgen/idgen/ordered/zkown"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/boltstore"
	"github.com/idgen/idgen/segment/mysqlstore"
)

// How a node serves ORDERED.
const (
	orderedNone           = iota // no segment store (ZooKeeper only): refused
	orderedOwners                // shard owners answering from memory
	orderedPerRequestNoZK        // one store statement per request: --mysql without --zk
)

// orderedPath decides how this configuration serves ORDERED.
//
// A cluster without ZooKeeper keeps the per-request path on purpose: MySQL
// is the only thing its nodes share, and a lease kept in MySQL is only as
// good as its replication. On an asynchronous or degraded semi-synchronous
// failover the new primary can lose the lease row and the epoch bump of a
// takeover, and two nodes would both own a shard and answer from memory;
// the per-request statement has no such state to lose (and the failover
// guard raises rows a node remembers). ZooKeeper's quorum keeps leases and
// epochs through any single failure, so owners need --zk.
func orderedPath(cfg Config, store segment.Store, noSegments error) int {
	if noSegments != nil {
		return orderedNone
	}
	if _, ok := orderedStore(store); !ok {
		return orderedPerRequestNoZK
	}
	if cfg.MySQL != "" && cfg.ZK == "" {
		return orderedPerRequestNoZK
	}
	return orderedOwners
}

// orderedStore is the shard owners' store (ordered.Store) on the node's
// segment store: the epoch-fenced store in the same MySQL database or
// bbolt file, on the segment store's connection pool or file handle (one
// per node). ok is false for a segment store owners cannot persist in.
func orderedStore(store segment.Store) (ordered.Store, bool) {
	switch s := store.(type) {
	case *mysqlstore.Store:
		return orderedmysql.New(s), true
	case *boltstore.Store:
		return orderedbolt.New(s), true
	}
	return nil, false
}

// startOwners starts this node's allocator and its coordinator: ZooKeeper
// leases in a cluster (on zs, the node's one ZooKeeper session), every
// shard for a standalone node.
func startOwners(ctx context.Context, cfg Config, store ordered.Store, gate segment.Gate, lossless func() bool, rpcPort int, zs *zksession.Session,
	m *metrics, log *zap.Logger) (*owners, error) {
	self := fmt.Sprintf("%s:%d", advertiseHost(cfg), rpcPort)
	if faultOrderedNoEpoch() {
		u, ok := store.(interface{ UnsafeIgnoreEpoch() })
		if !ok {
			return nil, fmt.Errorf("IDGEN_FAULT_ORDERED_NO_EPOCH=1 needs the MySQL store")
		}
		log.Error("IDGEN_FAULT_ORDERED_NO_EPOCH=1: ORDERED persists ignore the shard epoch (fault injection's negative control); a deposed owner's write-back will repeat numbers")
		u.UnsafeIgnoreEpoch()
	}
	o := &owners{self: self, log: log, forwarded: m.orderedForwards, forwardFailures: m.orderedForwardFailures, started: time.Now()}
	tc, err := forwardTLS(cfg)
	if err != nil {
		return nil, err
	}
	o.fwd = forward.New(tc, cfg.StoreTimeout)
	if cfg.ZK != "" {
		noWait := faultOrderedNoLeaseWait()
		if noWait {
			log.Error("IDGEN_FAULT_ORDERED_NO_LEASE_WAIT=1: a new ORDERED shard owner does not wait out the old owner's lease (fault injection's negative control); answers will go backwards")
		}
		_, leases := store.(ordered.LeaseStore) // the MySQL store: owners ride a ZooKeeper outage on it
		zc, err := zkown.Open(ctx, zkown.Config{Session: zs, Servers: strings.Split(cfg.ZK, ","), Root: cfg.ZKRoot, Cluster: cfg.Cluster,
			Auth: cfg.ZKAuth, SessionTimeout: cfg.ZKSessionTimeout, Self: self, Lease: cfg.OrderedLease, StoreLease: leases, StoreSafe: lossless,
			UnsafeNoLeaseWait: noWait, Logger: log.Named("owners"), Version: version})
		if err != nil {
			return nil, fmt.Errorf("ORDERED shard owners: %w", err)
		}
		o.coord = zc
	} else {
		o.coord = ordered.NewLocal(self)
	}
	o.alloc, err = ordered.New(ordered.Config{Store: store, Coordinator: o.coord, Self: self, Window: cfg.OrderedWindow,
		Timeout: cfg.StoreTimeout, Gate: gate, Logger: log, BeforeWriteBack: faultHandOffStall(log)})
	if err != nil {
		_ = o.coord.Close(ctx)
		return nil, err
	}
	if err := o.coord.Start(ctx, o.alloc); err != nil {
		_ = o.coord.Close(ctx)
		return nil, fmt.Errorf("ORDERED shard owners: %w", err)
	}
	// Not waited for: SNOWFLAKE, UNORDERED and the admin RPCs never wait
	// for ORDERED shard claims (issue 31). Until every shard has had an
	// owner, /readyz shows ORDERED as starting (claiming); a request for
	// a shard without an owner yet is refused as retryable, or ridden out
	// and forwarded, exactly as during a takeover.
	o.health = newShardHealth(o, 3*cfg.OrderedLease, log) // ordered_lease is validated (300ms..1m)
	m.reg.MustRegister(newOwnersCollector(o))
	return o, nil
}

// claiming is what ORDERED still waits for at start ("" once every shard
// has had an owner this node knows of: from then on a shard without one is
// the shard health's business, ordered_health.go). Latched: a start ends
// once, with the start's one summary line (claimedLine). The shard
// health's ticker asks too, so the line comes when the start ends, not at
// the next /readyz.
func (o *owners) claiming() string {
	if o == nil || o.claimed.Load() {
		return ""
	}
	list := o.coord.Owners()
	n := owned(list)
	if n == segment.OrderedShards {
		if o.claimed.CompareAndSwap(false, true) {
			o.claimedLine(list)
		}
		return ""
	}
	return fmt.Sprintf("claiming ORDERED shards: %d of %d have an owner", n, segment.OrderedShards)
}

// claimedLine is the start's summary: every shard has an owner, how many
// are this node's (claimed by it, and still held, however many rounds and
// goroutines claimed them) and how long since the owners started. The
// per-shard lines are at debug.
func (o *owners) claimedLine(list []ordered.Owner) {
	here := 0
	for _, ow := range list {
		if ow.Addr == o.self {
			here++
		}
	}
	o.log.Info("ORDERED shards claimed: every shard has an owner", zap.Int("here", here), zap.Int("elsewhere", len(list)-here),
		zap.Duration("took", time.Since(o.started)))
}

// owned is how many shards of list have an owner.
func owned(list []ordered.Owner) int {
	n := 0
	for _, o := range list {
		if o.Addr != "" {
			n++
		}
	}
	return n
}

// close hands every owned shard off (exact counters written back) and
// leaves the cluster. Safe to call twice.
func (o *owners) close() {
	o.closeOnce.Do(func() {
		if o.health != nil {
			o.health.close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start, before := time.Now(), o.alloc.Stats()
		if err := o.coord.Close(ctx); err != nil {
			o.log.Warn("handing ORDERED shards off", zap.Error(err))
		}
		o.stoppedLine(before, o.alloc.Stats(), time.Since(start))
	})
}

// stoppedLine is the stop's summary, from the allocator's counters before
// and after the coordinator's Close (atomic: right however the hand-offs
// ran): the shards this node held, how many were handed off with their
// exact counters written back or with nothing to write, how many without
// (the next owner waits a lease), and how many were dropped (the deadline
// passed). The per-shard lines are at debug; a shard handed off uncleanly
// or dropped is also warned about by the coordinator.
func (o *owners) stoppedLine(before, after ordered.Stats, took time.Duration) {
	released := int(after.Released - before.Released)
	unclean := int(after.UncleanHandOffs - before.UncleanHandOffs)
	o.log.Info("ORDERED shards handed off", zap.Int("held", before.ShardsOwned), zap.Int("handed_off", released-unclean),
		zap.Int("written_back", int(after.WriteBacks-before.WriteBacks)), zap.Int("unclean", unclean),
		zap.Int("dropped", int(after.Lost-before.Lost)), zap.Int("still_held", after.ShardsOwned), zap.Duration("took", took))
}

// forwardTLS is the TLS configuration of this node's forwarding to shard
// owners: nil (plain TCP) unless the node serves TLS. A node of a TLS
// cluster forwards over TLS, presenting its own certificate (mutual TLS
// clusters accept it when one CA issues the nodes' certificates) and
// trusting the client CA when one is set, the system roots otherwise.
func forwardTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	sc, err := serverTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: sc.Certificates, RootCAs: sc.ClientCAs}, nil
}
