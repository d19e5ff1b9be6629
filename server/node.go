package server

import (
	"context"
	"fmt"
	"github.com/idgen/idgen/cluster/zksession"
	"sync"
	"sync/atomic"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/worker"
)

// node is what the RPC handler, the admin port and the metrics read: it
// exists from the first moment of the process (so both ports answer while
// the store opens and the worker slot is claimed) and points at the issuer
// once start-up is done.
type node struct {
	register  func(*ext.Registry) error // Options.Register (nil: none)
	clk       clock.Clock
	mode      string
	cluster   string // --cluster, shown by /status
	startedAt time.Time
	refusals  *refusals    // the last refused RPCs, kept by the handler for /status
	access    statusAccess // who may read /status; set before the admin port serves

	mu          sync.Mutex
	startReason string

	serving atomic.Pointer[serving] // nil while starting
	floor   int64                   // snowflake floor, set before serving
	gate    segment.Gate            // ORDERED's barrier gate (nil: none), set before serving
	handOff func()                  // hands the ORDERED shards off (nil: none), set before serving
	// zk is the node's one ZooKeeper session (nil without --zk), opened
	// first in start and closed last; every guard takes it (package
	// cluster/zksession: one session, one membership lifetime) and none
	// closes it. Atomic: metrics read it while the node starts.
	zk atomic.Pointer[zksession.Session]
}

// handOffShards hands this node's ORDERED shards off before the RPC server
// stops (planned shutdown).
func (nd *node) handOffShards() {
	if nd.handOff != nil {
		nd.handOff()
	}
}

// serving is everything a started node serves with.
type serving struct {
	is         *issuer.Issuer
	unordered  *segment.Unordered
	owners     *owners // ORDERED shard owners (nil: the per-request path)
	lease      worker.Lease
	noSegments error // non-nil: UNORDERED/ORDERED are not offered (why)
	workers    func(ctx context.Context, idc int) ([]*idl.Worker, error)
	store      *storeHealth
}

func newNode(clk clock.Clock, cfg Config) *node {
	return &node{clk: clk, mode: cfg.Mode(), cluster: cfg.Cluster, startedAt: time.Now(), refusals: newRefusals(refusalRingSize),
		access: statusAccess{admin: cfg.AdminToken, client: cfg.ClientToken, public: cfg.StatusPublic}}
}

// setStarting records what start-up is doing now (shown by /readyz and in
// the retryable errors NextIDs answers meanwhile).
func (nd *node) setStarting(reason string) {
	nd.mu.Lock()
	nd.startReason = reason
	nd.mu.Unlock()
}

func (nd *node) starting() string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.startReason
}

// ready switches the node to serving.
// The floor is fixed here for the life of the process: a later change of
// the cluster's created_ms (a wiped ZooKeeper) never lowers it.
func (nd *node) ready(is *issuer.Issuer, u *segment.Unordered, own *owners, lease worker.Lease, health *storeHealth, noSegments error,
	floor int64, workers func(ctx context.Context, idc int) ([]*idl.Worker, error)) {
	nd.floor = floor
	nd.serving.Store(&serving{is: is, unordered: u, owners: own, lease: lease, noSegments: noSegments, workers: workers, store: health})
}

// workers answers ListWorkers (nothing while starting).
func (nd *node) workers(ctx context.Context, idc int) ([]*idl.Worker, error) {
	s := nd.serving.Load()
	if s == nil {
		return nil, nil
	}
	return s.workers(ctx, idc)
}

// Channel states reported by /readyz and the idgen_channel_ready metric.
const (
	chServing     = "serving"
	chDegraded    = "degraded"          // snowflake: serving from the cached slot, ZooKeeper unreachable
	chStarting    = "starting"          // not serving yet: store opening, slot being claimed or waiting past its mark
	chRollback    = "clock_rollback"    // snowflake: clock behind the last issued timestamp
	chJump        = "clock_jump"        // snowflake: clock past the durable mark, being extended
	chFenced      = "fenced"            // snowflake: no worker slot held
	chUnavailable = "store_unavailable" // segment channels: store down and nothing buffered
	chUnserved    = "shards_unserved"   // ordered: shards without a serving owner (ordered_health.go)
	chDisabled    = "disabled"          // not offered by this configuration
)

// channelStatus is one channel's readiness.
type channelStatus struct {
	State string `json:"state"`
	Ready bool   `json:"ready"` // strict: this channel itself serves now
	// CanFallBack (snowflake only): a refusing snowflake channel can still
	// answer businesses that allow fallback, because segments serve.
	CanFallBack  bool   `json:"can_fall_back,omitempty"`
	Reason       string `json:"reason,omitempty"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
}

// status is the node's whole readiness picture.
type status struct {
	Ready  bool   `json:"ready"`
	State  string `json:"state"` // starting, serving, degraded, clock_rollback, clock_jump, fenced
	Reason string `json:"reason,omitempty"`
	// WaitRemainingMs is how long until SNOWFLAKE serves while starting
	// (0 when unknown or not waiting).
	WaitRemainingMs int64                    `json:"wait_remaining_ms,omitempty"`
	Mode            string                   `json:"mode"`
	Channels        map[string]channelStatus `json:"channels"`
}

// status computes readiness. The node is ready (HTTP 200) while every
// channel it is configured for can serve or, for snowflake refusing at run
// time, fall back; a node that has not served snowflake yet (start-up
// wait) is not ready.
func (nd *node) status() status {
	s := nd.serving.Load()
	if s == nil {
		why := "starting: " + nd.starting()
		st := channelStatus{State: chStarting, Reason: why, RetryAfterMs: 500}
		return status{State: chStarting, Reason: why, Mode: nd.mode, Channels: map[string]channelStatus{
			"snowflake": st, "unordered": st, "ordered": st}}
	}
	out := status{Mode: nd.mode, Channels: map[string]channelStatus{}}
	segOK := true
	unserved := s.owners.unservedShards()
	claiming := s.owners.claiming()
	for _, name := range []string{"unordered", "ordered"} {
		var c channelStatus
		switch {
		case s.noSegments != nil:
			c = channelStatus{State: chDisabled, Reason: s.noSegments.Error()}
		case name == "ordered" && nd.gateClosed() != nil:
			c = channelStatus{State: chUnavailable, Reason: nd.gateClosed().Error(), RetryAfterMs: 200}
			segOK = false
		case name == "ordered" && claiming != "":
			// Not yet every shard claimed (start): the channel itself
			// waits, the node and its other channels serve.
			c = channelStatus{State: chStarting, Reason: "starting: " + claiming, RetryAfterMs: 200}
		case name == "ordered" && len(unserved) > 0:
			// Strict for the channel only: the other shards and channels
			// serve, and taking this node out of a load balancer brings
			// no shard back.
			c = channelStatus{State: chUnserved, RetryAfterMs: 1000, Reason: fmt.Sprintf(
				"ORDERED shards %v have had no serving owner for %v or longer (no owner, or owned here and not serving); requests for their keys are refused, the other shards serve",
				unserved, s.owners.health.graceDur())}
		case s.store.healthy() || (name == "unordered" && buffered(s.unordered) > 0):
			c = channelStatus{State: chServing, Ready: true}
		default:
			c = channelStatus{State: chUnavailable, Reason: s.store.lastErr(), RetryAfterMs: 200}
			segOK = false
		}
		out.Channels[name] = c
	}
	sf := s.is.SnowflakeState()
	c := channelStatus{State: sf.State, Reason: sf.Reason, RetryAfterMs: sf.RetryAfter.Milliseconds()}
	switch sf.State {
	case chServing:
		if s.lease.State() == worker.StateDegraded {
			c.State, c.Reason = chDegraded, "serving from the cached worker slot while the worker registry is unreachable"
		}
		c.Ready = true
	case chRollback, chJump, chFenced:
		c.CanFallBack = s.noSegments == nil && segOK
	}
	out.Channels["snowflake"] = c
	out.State, out.Reason = c.State, c.Reason
	if c.State == chStarting {
		out.WaitRemainingMs = c.RetryAfterMs
	}
	out.Ready = (c.Ready || c.CanFallBack) && segOK
	return out
}

// gateClosed returns why ORDERED's gate is closed, nil when open.
func (nd *node) gateClosed() error {
	if nd.gate == nil {
		return nil
	}
	_, err := nd.gate.Enter()
	return err
}

// String is the node state Clock() answers and idgen_node_state exports.
func (nd *node) String() string { return nd.status().State }

// buffered is how many UNORDERED numbers are in memory over all businesses.
func buffered(u *segment.Unordered) int64 {
	var n int64
	for _, st := range u.Stats() {
		n += st.CurrentRemaining + st.NextRemaining
	}
	return n
}

// storeHealth pings the store in the background (stores that can) so
// readiness never waits on a store call.
type storeHealth struct {
	ok   atomic.Bool
	err  atomic.Pointer[string]
	stop chan struct{}
	once sync.Once
}

// pinger is implemented by stores that can be probed cheaply.
type pinger interface {
	Ping(ctx context.Context) error
}

const storePingEvery = 2 * time.Second

func newStoreHealth(store segment.Store) *storeHealth {
	h := &storeHealth{stop: make(chan struct{})}
	h.ok.Store(true)
	p, ok := store.(pinger)
	if !ok {
		return h
	}
	go func() {
		t := time.NewTicker(storePingEvery)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), storePingEvery)
			err := p.Ping(ctx)
			cancel()
			if err != nil {
				msg := err.Error()
				h.err.Store(&msg)
			}
			h.ok.Store(err == nil)
		}
	}()
	return h
}

// close stops the background pings.
func (h *storeHealth) close() { h.once.Do(func() { close(h.stop) }) }

func (h *storeHealth) healthy() bool { return h.ok.Load() }

func (h *storeHealth) lastErr() string {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return "segment store unreachable"
}
