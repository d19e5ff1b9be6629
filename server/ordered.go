package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/issuer"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/forward"
	"github.com/idgen/idgen/ordered/zkown"
	"github.com/idgen/idgen/segment"
)

// owners is the ORDERED channel served by shard owners: this node's
// allocator, its coordinator, and the forwarding to other owners.
//
// One policy path (issue 30): a request is checked (token, max_batch, rate
// limit, ID quota, plugins and audit, output format) once, by the node that
// answers it. A node that does not own the sub key's shard therefore
// forwards the caller's whole NextIDs request, with the caller's own token
// and no_forward set, before checking anything, and relays the owner's
// final answer (ranges, IDs or codes) unchanged. The owner sees the
// forwarding node's socket address as the caller (what the audit records):
// no header is trusted, and no node-to-node secret is needed, because the
// hop grants nothing the caller could not get by asking the owner itself.
type owners struct {
	alloc *ordered.Allocator
	coord interface {
		ordered.Coordinator
		Owners() []ordered.Owner
	}
	self string
	fwd  *forward.Forwarder
	log  *zap.Logger

	forwarded, forwardFailures prometheus.Counter
	closeOnce                  sync.Once
	// health: the shards without a serving owner (ordered_health.go).
	health *shardHealth
	// claimed: every shard has had an owner since start (claiming).
	claimed atomic.Bool
	started time.Time // when startOwners began: the start summary's took
}

var _ issuer.OrderedTaker = (*owners)(nil)

// Take serves the request from this node's allocator. It never forwards:
// by the time the issuer calls it, the request's policy was applied here,
// and a raw hop to another node would let that node allocate unchecked
// (the side door of issue 30). A shard another node owns is refused at
// once (NotOwner, with the owner), and the handler forwards the whole
// request instead (nextOrdered).
func (o *owners) Take(ctx context.Context, biz segment.Biz, subKey string, n int64, rid segment.RequestID) (segment.Range, error) {
	// A shard changing hands (a hand-off, a node joining, the first
	// moments of a node) is refused for tens of milliseconds: ride it out
	// here, briefly, instead of answering the caller a refusal. A lease
	// wait (seconds) is answered at once with its retry hint, never held.
	return rideOut(ctx, o.alloc, subKey, func() (segment.Range, bool, error) {
		r, err := o.alloc.Take(ctx, biz, subKey, n, rid)
		return r, inTransition(err) && o.ownedElsewhere(err) == "", err
	})
}

// rideOut calls try until it succeeds, says not to try again, or the next
// pause would pass transitionBudget (or ctx's deadline): pauses of 5 ms,
// doubling up to 80 ms. It returns try's last answer.
//
// A pause also ends when the channel w.ShardChanged(subKey) returned
// before the try is closed: the shard's term changed on this node, so the
// next try may succeed. Without it a shard that started serving here
// during a pause answered only at the pause's end: a new node's first
// ORDERED answer came up to 80 ms after its shard was claimed (issue 31),
// and the side of a back-off step the claim fell on moved the start-up
// figure by a whole step. Taken before the try, the channel misses no
// change after the try looked (Allocator.ShardChanged). Changes of owner
// on other nodes (a forward's target) still wait for the timer.
func rideOut[T any](ctx context.Context, w shardWatch, subKey string, try func() (out T, again bool, err error)) (T, error) {
	return rideOutAfter(ctx, time.After, w, subKey, try)
}

// shardWatch tells a change of a sub key's shard (*ordered.Allocator):
// an interface, not a closure, so that the ride-out on every ORDERED
// request allocates nothing for it.
type shardWatch interface {
	ShardChanged(subKey string) <-chan struct{}
}

// rideOutAfter is rideOut with the pauses' timer given (time.After).
func rideOutAfter[T any](ctx context.Context, after func(time.Duration) <-chan time.Time, w shardWatch, subKey string,
	try func() (out T, again bool, err error)) (T, error) {
	deadline := time.Now().Add(transitionBudget)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	pause := 5 * time.Millisecond
	for {
		wake := w.ShardChanged(subKey)
		out, again, err := try()
		if err == nil || !again || time.Now().Add(pause).After(deadline) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-wake:
		case <-after(pause):
		}
		pause = min(2*pause, 80*time.Millisecond)
	}
}

// transitionBudget bounds how long Take and nextOrdered ride out a shard
// changing hands (rideOut).
const transitionBudget = 500 * time.Millisecond

// inTransition reports a refusal that passes within milliseconds: the
// shard has no owner this node knows of, is being handed off, or was just
// taken over and the new owner is loading.
func inTransition(err error) bool {
	var ue *ordered.UnavailableError
	if !errors.As(err, &ue) {
		return false
	}
	return (ue.NotOwner && ue.Err == nil) || (ue.RetryAfter > 0 && ue.RetryAfter <= 100*time.Millisecond && ue.Err == nil)
}

// ownedElsewhere returns the address of the shard's owner when err is the
// allocator's refusal of a shard another node owns ("" otherwise).
func (o *owners) ownedElsewhere(err error) string {
	var ue *ordered.UnavailableError
	if !errors.As(err, &ue) || !ue.NotOwner || ue.Owner.Addr == "" || ue.Owner.Self || ue.Owner.Addr == o.self {
		return ""
	}
	return ue.Owner.Addr
}

// ownerOf returns the address of subKey's shard owner when it is another
// node ("" when it is this node or no node this node knows of: then the
// request is served, or refused, here).
func (o *owners) ownerOf(subKey string) string {
	if o.alloc.Holds(subKey) {
		return ""
	}
	ow := o.coord.Owner(segment.Shard(subKey))
	if ow.Addr == "" || ow.Self || ow.Addr == o.self {
		return ""
	}
	return ow.Addr
}

// nextOrdered answers an ORDERED NextIDs request on a node with shard
// owners: forwarded whole to the shard's owner when that is another node,
// served here (the full policy path, issuer.Next) otherwise. A shard that
// moves between the check and the answer, or an owner that is between
// owners itself, is ridden out for transitionBudget, the owner map read
// again each time; a refused attempt was counted by the node that refused
// it (its limits and plugins ran), which errs on the side of the limits.
func (h *handler) nextOrdered(ctx context.Context, is *issuer.Issuer, o *owners, req *idl.NextIDsRequest, r issuer.Request) (*idl.NextIDsResponse, error) {
	return rideOut(ctx, o.alloc, r.SubKey, func() (*idl.NextIDsResponse, bool, error) {
		if addr := o.ownerOf(r.SubKey); addr != "" {
			resp, err := o.forward(ctx, addr, req, r.Count)
			return resp, forward.Transition(err), err
		}
		out, err := is.Next(ctx, r)
		again := o.ownedElsewhere(err) != ""
		resp, err := h.nextIDsAnswer(ctx, req, out, err)
		return resp, again, err
	})
}

// forward sends the caller's whole request to the owner at addr, marked
// no_forward, and returns the owner's answer as the caller's: its numbers
// in their final form, or its refusal (the message naming the owner).
func (o *owners) forward(ctx context.Context, addr string, req *idl.NextIDsRequest, count int) (*idl.NextIDsResponse, error) {
	o.forwarded.Inc()
	resp, err := o.fwd.NextIDs(ctx, addr, req, count)
	if err != nil {
		o.forwardFailures.Inc()
	}
	return resp, err
}

// OrderedTake is the ORDERED hop of nodes older than issue 30, kept for
// rolling upgrades (this version forwards NextIDs). It is served as
// NextIDs on channel ORDERED with no_forward, through the same policy path
// (issuer.Next): validation, max_batch, token, rate limit, ID quota,
// plugins and audit. Its answer is a single range, so a business whose
// output is not plain integers is refused (issuer.Request.PlainOnly)
// before anything is allocated: its raw counters never leave the node. A
// node that does not own the shard (the old node's map was stale) refuses
// it, retryable, before the policy: it never forwards.
func (h *handler) OrderedTake(ctx context.Context, req *idl.OrderedTakeRequest) (resp *idl.OrderedTakeResponse, err error) {
	defer h.done("OrderedTake", segment.ChannelOrdered.String(), time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request: send an OrderedTakeRequest")
	}
	s := h.node.serving.Load()
	if s == nil {
		_, err := h.issuer(idl.ErrorCode_SEGMENT_UNAVAILABLE)
		return nil, err
	}
	if s.owners == nil {
		return nil, &idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE, Retryable: true, RetryAfterMs: 200,
			Message: "this node serves ORDERED without shard owners (--mysql without --zk, or no segment store): send NextIDs instead"}
	}
	if addr := s.owners.ownerOf(req.SubKey); addr != "" {
		// Refused before the policy: a stale hop costs no quota and leaves
		// no audit record here; the old node retries with its new map.
		return nil, &idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE, Retryable: true, RetryAfterMs: 50,
			Message: fmt.Sprintf("ordered shard %d: this node does not own the shard (owner %s): send NextIDs to any node", segment.Shard(req.SubKey), addr)}
	}
	ch := segment.ChannelOrdered
	r := issuer.Request{Biz: req.Biz, Channel: &ch, Count: int(req.Count), SubKey: req.SubKey, RequestID: req.GetRequestId(),
		Caller: callerAddr(ctx), Token: req.GetToken(), PlainOnly: true}
	out, err := s.is.Next(ctx, r)
	if err := h.issued(ctx, "OrderedTake", req.Biz, req.GetToken() != "", out, err); err != nil {
		return nil, err
	}
	if len(out.Ranges) != 1 {
		return nil, h.toIDLError(req.Biz, fmt.Errorf("OrderedTake served %d ranges, want 1", len(out.Ranges)))
	}
	return &idl.OrderedTakeResponse{Range: &idl.IDRange{First: out.Ranges[0].First, Last: out.Ranges[0].Last}}, nil
}

// OrderedOwners answers the shard-to-owner map (the Go client routes
// ORDERED requests to the owner with it). Open to callers with the client
// token, like ListWorkers.
func (h *handler) OrderedOwners(ctx context.Context, req *idl.OrderedOwnersRequest) (resp *idl.OrderedOwnersResponse, err error) {
	defer h.done("OrderedOwners", "", time.Now(), &err)
	if req == nil {
		req = &idl.OrderedOwnersRequest{} // every field is optional: an empty request (was a nil dereference)
	}
	if err := h.clientAuth(ctx, "OrderedOwners", req.Token); err != nil {
		return nil, err
	}
	s := h.node.serving.Load()
	if s == nil || s.owners == nil {
		return &idl.OrderedOwnersResponse{Owners: []*idl.ShardOwner{}}, nil
	}
	list := s.owners.coord.Owners()
	out := make([]*idl.ShardOwner, 0, len(list))
	for _, o := range list {
		out = append(out, &idl.ShardOwner{Shard: int32(o.Shard), Addr: o.Addr, Epoch: o.Epoch})
	}
	return &idl.OrderedOwnersResponse{Owners: out}, nil
}

// ownersCollector exports the allocator's and the forwarding's counters.
type ownersCollector struct {
	o     *owners
	descs map[string]*prometheus.Desc
}

func newOwnersCollector(o *owners) *ownersCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &ownersCollector{o: o, descs: map[string]*prometheus.Desc{
		"answered":    d("idgen_ordered_owner_answers_total", "ORDERED requests this node answered as a shard's owner"),
		"memory":      d("idgen_ordered_owner_memory_answers_total", "owner answers that needed no store write (cached reservations)"),
		"persists":    d("idgen_ordered_owner_persists_total", "group commits (persists) of the owned shards"),
		"rows":        d("idgen_ordered_owner_persisted_rows_total", "key rows written by those persists"),
		"pfail":       d("idgen_ordered_owner_persist_failures_total", "persists that failed (store down, fenced)"),
		"pseconds":    d("idgen_ordered_owner_persist_seconds_total", "time spent in persists; divided by persists: the mean group-commit latency"),
		"pduration":   d("idgen_ordered_persist_duration_seconds", "latency of the owned shards' persists (group commits, failed ones included), the store time gapless ORDERED callers wait for; _sum equals idgen_ordered_owner_persist_seconds_total"),
		"fenced":      d("idgen_ordered_owner_fenced_total", "loads or persists refused by a newer owner's epoch (this node had lost the shard)"),
		"lease":       d("idgen_ordered_owner_lease_refusals_total", "answers withheld by the lease: during the wait after a takeover, or after the lease could not be renewed"),
		"notowner":    d("idgen_ordered_not_owner_total", "ORDERED requests for shards this node does not own"),
		"replays":     d("idgen_ordered_owner_replays_total", "request ids answered with their first range"),
		"regress":     d("idgen_ordered_owner_regressions_total", "keys the store had behind numbers this node answered (raised)"),
		"acquired":    d("idgen_ordered_shards_acquired_total", "shard terms started on this node"),
		"released":    d("idgen_ordered_shards_released_total", "planned hand-offs of shards by this node"),
		"lost":        d("idgen_ordered_shards_lost_total", "shards this node lost without a hand-off (lease not renewed, taken over)"),
		"owned":       d("idgen_ordered_shards_owned", "ORDERED shards this node owns"),
		"serving":     d("idgen_ordered_shards_serving", "owned shards past their lease wait"),
		"keys":        d("idgen_ordered_owner_keys", "keys held in memory by this node's owned shards"),
		"lease_left":  d("idgen_ordered_lease_remaining_seconds", "time until this node's ownership lease runs out unless renewed (negative: expired)"),
		"live":        d("idgen_ordered_live_nodes", "nodes taking part in ORDERED shard ownership as this node sees them, itself included (ZooKeeper clusters)"),
		"renew_fail":  d("idgen_ordered_lease_renew_failures_total", "ownership lease renewals that failed or came back too late (ZooKeeper clusters)"),
		"lapses":      d("idgen_ordered_lease_lapses_total", "times this node's ownership lease ran out while it owned shards (ZooKeeper clusters)"),
		"acq_fail":    d("idgen_ordered_acquire_failures_total", "shard takeovers whose claim in the store failed; the shard is given up and retried (ZooKeeper clusters)"),
		"unserved":    d("idgen_ordered_shards_unserved", "ORDERED shards without a serving owner as this node sees them, for longer than about three leases: no owner, or owned here and not serving (fenced, claim failing); their keys are refused"),
		"reverify":    d("idgen_ordered_owner_reverified_total", "answers from a cached reservation held back for a persist on the MySQL server the cluster uses now (the barrier's gate closed since the reservation was written: a server change)"),
		"unclean":     d("idgen_ordered_unclean_handoffs_total", "planned hand-offs whose exact write-back never succeeded (the gate or the store refused it); the shard was released with a lease wait"),
		"late":        d("idgen_ordered_owner_answers_after_loss_total", "ORDERED answers of numbers persisted under a shard term that ended before the answer (lost, handed off, lease run out); refused, each would have been a hole (in gapless mode, one no failed call explains)"),
		"reqdrop":     d("idgen_ordered_request_ids_dropped_total", "answered ORDERED request ids forgotten by the memory's count or byte bound before their TTL (a cached-mode retry of one reaching this owner is a new request: a gap, never a duplicate; gapless ones are read back from the store)"),
		"storedrop":   d("idgen_ordered_stored_request_ids_dropped_total", "stored gapless request ids forgotten by the memory's count or byte bound before their TTL (a barrier after a lossy MySQL failover cannot store them again)"),
		"srenew":      d("idgen_ordered_lease_store_renewals_total", "ownership lease renewals in the MySQL store (every lease/3, beside ZooKeeper's), successful (ZooKeeper clusters)"),
		"srenew_fail": d("idgen_ordered_lease_store_renew_failures_total", "ownership lease renewals in the MySQL store that failed (store unreachable, gate closed after a server change) (ZooKeeper clusters)"),
		"scarried":    d("idgen_ordered_lease_store_carried_total", "store renewals that extended this node's lease while its ZooKeeper renewals failed: ORDERED runs on MySQL alone; alert when it grows for long (ZooKeeper out of reach) (ZooKeeper clusters)"),
		"deferred":    d("idgen_ordered_takeovers_deferred_total", "shard takeover decisions put off because the owner renews its lease through the store (alive, though its ZooKeeper znode looks stale: cut off from ZooKeeper) (ZooKeeper clusters)"),
		"cfenced":     d("idgen_ordered_shards_fenced_total", "owned shards given up because the store held a newer epoch that ZooKeeper did not know of (a lost ZooKeeper history, or a second cluster on the database) (ZooKeeper clusters)"),
	}}
}

func (c *ownersCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *ownersCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.o.alloc.Stats()
	counter := func(k string, v uint64) {
		ch <- prometheus.MustNewConstMetric(c.descs[k], prometheus.CounterValue, float64(v))
	}
	gauge := func(k string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[k], prometheus.GaugeValue, v)
	}
	counter("answered", s.Answered)
	counter("memory", s.FromMemory)
	counter("persists", s.Persists)
	counter("rows", s.PersistedRows)
	counter("pfail", s.PersistFailures)
	ch <- prometheus.MustNewConstMetric(c.descs["pseconds"], prometheus.CounterValue, s.PersistSeconds)
	ch <- persistHistogram(c.descs["pduration"], s.PersistDurations)
	counter("fenced", s.Fenced)
	counter("lease", s.LeaseRefusals)
	counter("notowner", s.NotOwner)
	counter("replays", s.Replays)
	counter("regress", s.Regressions)
	counter("acquired", s.Acquired)
	counter("released", s.Released)
	counter("lost", s.Lost)
	counter("reverify", s.Reverified)
	counter("unclean", s.UncleanHandOffs)
	counter("late", s.AnsweredAfterLoss)
	counter("reqdrop", s.RequestsDropped)
	counter("storedrop", s.StoredRequestsDropped)
	gauge("owned", float64(s.ShardsOwned))
	gauge("serving", float64(s.ShardsServing))
	gauge("keys", float64(s.Keys))
	left := time.Until(c.o.coord.ValidUntil()).Seconds()
	gauge("lease_left", min(left, 1e9))
	if c.o.health != nil {
		gauge("unserved", float64(len(c.o.health.stuck())))
	}
	if zc, ok := c.o.coord.(*zkown.Coordinator); ok {
		zs := zc.Stats()
		gauge("live", float64(zs.LiveNodes))
		counter("renew_fail", zs.LeaseRenewFailures)
		counter("lapses", zs.LeaseLapses)
		counter("acq_fail", zs.AcquireFailures)
		counter("cfenced", zs.Fenced)
		counter("srenew", zs.StoreRenewals)
		counter("srenew_fail", zs.StoreRenewFailures)
		counter("scarried", zs.StoreCarried)
		counter("deferred", zs.TakeoversDeferred)
	}
}

// persistHistogram exports the allocator's persist-duration histogram.
func persistHistogram(desc *prometheus.Desc, h ordered.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, le := range h.Bounds {
		buckets[le] = h.Counts[i]
	}
	return prometheus.MustNewConstHistogram(desc, h.Count, h.Sum, buckets)
}
