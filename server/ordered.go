package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	idgenclient "github.com/idgen/idgen/client"
	"github.com/idgen/idgen/issuer"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/zkown"
	"github.com/idgen/idgen/segment"
)

// owners is the ORDERED channel served by shard owners: this node's
// allocator, its coordinator, and the forwarding to other owners.
type owners struct {
	alloc *ordered.Allocator
	coord interface {
		ordered.Coordinator
		Owners() []ordered.Owner
	}
	self string
	fwd  *forwarder
	log  *zap.Logger

	forwarded, forwardFailures prometheus.Counter
	closeOnce                  sync.Once
	// health: the shards without a serving owner (ordered_health.go).
	health *shardHealth
}

var _ issuer.OrderedTaker = (*owners)(nil)

// Take serves the request from this node's allocator when it owns the
// shard, and otherwise forwards it to the owner (one internal hop). The
// owner never forwards further (OrderedTake answers from its allocator
// only), so a stale map costs a retryable refusal, never a loop.
func (o *owners) Take(ctx context.Context, biz segment.Biz, subKey string, n int64, requestID string) (segment.Range, error) {
	// A shard changing hands (a hand-off, a node joining, the first
	// moments of a node) is refused for tens of milliseconds: ride it out
	// here, briefly, instead of answering the caller a refusal. A lease
	// wait (seconds) is answered at once with its retry hint, never held.
	deadline := time.Now().Add(transitionBudget)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	pause := 5 * time.Millisecond
	for {
		r, err := o.takeOnce(ctx, biz, subKey, n, requestID)
		if err == nil || !inTransition(err) || time.Now().Add(pause).After(deadline) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 80*time.Millisecond)
	}
}

// transitionBudget bounds how long Take rides out a shard changing hands.
const transitionBudget = 500 * time.Millisecond

// inTransition reports a refusal that passes within milliseconds: the
// shard has no owner this node knows of, is being handed off, or was just
// taken over and the new owner is loading.
func inTransition(err error) bool {
	var ue *ordered.UnavailableError
	if !errors.As(err, &ue) {
		return false
	}
	return (ue.NotOwner && ue.Err == nil) || (ue.RetryAfter > 0 && ue.RetryAfter <= 100*time.Millisecond && ue.Err == nil) ||
		(ue.Forwarded && ue.RetryAfter <= 100*time.Millisecond)
}

func (o *owners) takeOnce(ctx context.Context, biz segment.Biz, subKey string, n int64, requestID string) (segment.Range, error) {
	r, err := o.alloc.Take(ctx, biz, subKey, n, requestID)
	var ue *ordered.UnavailableError
	if err == nil || !errors.As(err, &ue) || !ue.NotOwner || ue.Owner.Addr == "" || ue.Owner.Self || ue.Owner.Addr == o.self {
		return r, err
	}
	o.forwarded.Inc()
	r, ferr := o.fwd.take(ctx, ue.Owner.Addr, biz.Name, subKey, n, requestID, issuer.CallerToken(ctx))
	if ferr != nil {
		o.forwardFailures.Inc()
	}
	return r, ferr
}

// forwarder keeps one Kitex client per owner address.
type forwarder struct {
	mu      sync.Mutex
	clients map[string]idgensvc.Client
	tls     *tls.Config // nil: plain TCP
	timeout time.Duration
}

func newForwarder(cfg Config) (*forwarder, error) {
	f := &forwarder{clients: map[string]idgensvc.Client{}, timeout: cfg.StoreTimeout}
	if cfg.TLSCert == "" {
		return f, nil
	}
	// A node of a TLS cluster forwards over TLS, presenting its own
	// certificate (mutual TLS clusters accept it when one CA issues the
	// nodes' certificates) and trusting the client CA when one is set, the
	// system roots otherwise.
	sc, err := serverTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: sc.Certificates, RootCAs: sc.ClientCAs}
	f.tls = tc
	return f, nil
}

func (f *forwarder) client(addr string) (idgensvc.Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[addr]; ok {
		return c, nil
	}
	opts := []client.Option{client.WithHostPorts(addr), client.WithConnectTimeout(300 * time.Millisecond)}
	if f.tls != nil {
		opts = append(opts, client.WithDialer(idgenclient.TLSDialer(f.tls)))
	}
	c, err := idgensvc.NewClient("idgen", opts...)
	if err != nil {
		return nil, err
	}
	f.clients[addr] = c
	return c, nil
}

// take asks the owner at addr. Its refusals come back as the errors the
// issuer maps to the same codes; a transport failure is retryable.
func (f *forwarder) take(ctx context.Context, addr, biz, subKey string, n int64, requestID, token string) (segment.Range, error) {
	c, err := f.client(addr)
	if err != nil {
		return segment.Range{}, &ordered.UnavailableError{Shard: segment.Shard(subKey), Reason: "forwarding to the owner " + addr, Err: err}
	}
	req := &idl.OrderedTakeRequest{Biz: biz, SubKey: subKey, Count: int32(n)}
	if requestID != "" {
		req.RequestId = &requestID
	}
	if token != "" {
		req.Token = &token
	}
	timeout := f.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	resp, err := c.OrderedTake(ctx, req, callopt.WithRPCTimeout(max(timeout, time.Millisecond)))
	if err != nil {
		return segment.Range{}, fromOwnerError(addr, subKey, err)
	}
	if resp.Range == nil || resp.Range.Last-resp.Range.First+1 != n || resp.Range.First < 1 {
		return segment.Range{}, &ordered.UnavailableError{Shard: segment.Shard(subKey),
			Reason: fmt.Sprintf("owner %s answered a malformed range %v for %d numbers", addr, resp.Range, n)}
	}
	return segment.Range{First: resp.Range.First, Last: resp.Range.Last}, nil
}

// fromOwnerError turns the owner's answer back into this node's errors.
func fromOwnerError(addr, subKey string, err error) error {
	var ie *idl.IdgenError
	if !errors.As(err, &ie) {
		return &ordered.UnavailableError{Shard: segment.Shard(subKey), Reason: "forwarding to the owner " + addr, Err: err}
	}
	msg := fmt.Errorf("owner %s: %s", addr, ie.Message)
	switch ie.Code {
	case idl.ErrorCode_INVALID_ARGUMENT:
		if errors.Is(err, segment.ErrRequestMismatch) {
			return fmt.Errorf("%w: %w", segment.ErrRequestMismatch, msg)
		}
		return fmt.Errorf("%w: %w", segment.ErrInvalid, msg)
	case idl.ErrorCode_UNKNOWN_BIZ:
		return fmt.Errorf("%w: %w", segment.ErrUnknownBiz, msg)
	case idl.ErrorCode_EXHAUSTED:
		return fmt.Errorf("%w: %w", segment.ErrExhausted, msg)
	case idl.ErrorCode_UNAUTHENTICATED:
		return fmt.Errorf("%w: %w", issuer.ErrUnauthenticated, msg)
	}
	return &ordered.UnavailableError{Shard: segment.Shard(subKey), Reason: "the owner " + addr + " refused",
		RetryAfter: time.Duration(ie.RetryAfterMs) * time.Millisecond, Err: msg, Forwarded: true}
}

// OrderedTake is the internal hop: this node answers as the shard's owner,
// from its allocator only (never forwarding further).
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
	biz, err := s.is.OwnerBiz(ctx, req.Biz, req.GetToken())
	if err == nil {
		var r segment.Range
		if r, err = s.owners.alloc.Take(ctx, biz, req.SubKey, int64(req.Count), req.GetRequestId()); err == nil {
			return &idl.OrderedTakeResponse{Range: &idl.IDRange{First: r.First, Last: r.Last}}, nil
		}
	}
	if errors.Is(err, issuer.ErrUnauthenticated) {
		h.authFailed(ctx, "OrderedTake", authClient, req.GetToken() != "")
	}
	return nil, h.toIDLError(req.Biz, err)
}

// OrderedOwners answers the shard-to-owner map (the Go client routes
// ORDERED requests to the owner with it). Open to callers with the client
// token, like ListWorkers.
func (h *handler) OrderedOwners(ctx context.Context, req *idl.OrderedOwnersRequest) (resp *idl.OrderedOwnersResponse, err error) {
	defer h.done("OrderedOwners", "", time.Now(), &err)
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
		"answered":   d("idgen_ordered_owner_answers_total", "ORDERED requests this node answered as a shard's owner"),
		"memory":     d("idgen_ordered_owner_memory_answers_total", "owner answers that needed no store write (cached reservations)"),
		"persists":   d("idgen_ordered_owner_persists_total", "group commits (persists) of the owned shards"),
		"rows":       d("idgen_ordered_owner_persisted_rows_total", "key rows written by those persists"),
		"pfail":      d("idgen_ordered_owner_persist_failures_total", "persists that failed (store down, fenced)"),
		"pseconds":   d("idgen_ordered_owner_persist_seconds_total", "time spent in persists; divided by persists: the mean group-commit latency"),
		"pduration":  d("idgen_ordered_persist_duration_seconds", "latency of the owned shards' persists (group commits, failed ones included), the store time gapless ORDERED callers wait for; _sum equals idgen_ordered_owner_persist_seconds_total"),
		"fenced":     d("idgen_ordered_owner_fenced_total", "loads or persists refused by a newer owner's epoch (this node had lost the shard)"),
		"lease":      d("idgen_ordered_owner_lease_refusals_total", "answers withheld by the lease: during the wait after a takeover, or after the lease could not be renewed"),
		"notowner":   d("idgen_ordered_not_owner_total", "ORDERED requests for shards this node does not own"),
		"replays":    d("idgen_ordered_owner_replays_total", "request ids answered with their first range"),
		"regress":    d("idgen_ordered_owner_regressions_total", "keys the store had behind numbers this node answered (raised)"),
		"acquired":   d("idgen_ordered_shards_acquired_total", "shard terms started on this node"),
		"released":   d("idgen_ordered_shards_released_total", "planned hand-offs of shards by this node"),
		"lost":       d("idgen_ordered_shards_lost_total", "shards this node lost without a hand-off (lease not renewed, taken over)"),
		"owned":      d("idgen_ordered_shards_owned", "ORDERED shards this node owns"),
		"serving":    d("idgen_ordered_shards_serving", "owned shards past their lease wait"),
		"keys":       d("idgen_ordered_owner_keys", "keys held in memory by this node's owned shards"),
		"lease_left": d("idgen_ordered_lease_remaining_seconds", "time until this node's ownership lease runs out unless renewed (negative: expired)"),
		"live":       d("idgen_ordered_live_nodes", "nodes taking part in ORDERED shard ownership as this node sees them, itself included (ZooKeeper clusters)"),
		"renew_fail": d("idgen_ordered_lease_renew_failures_total", "ownership lease renewals that failed or came back too late (ZooKeeper clusters)"),
		"lapses":     d("idgen_ordered_lease_lapses_total", "times this node's ownership lease ran out while it owned shards (ZooKeeper clusters)"),
		"acq_fail":   d("idgen_ordered_acquire_failures_total", "shard takeovers whose claim in the store failed; the shard is given up and retried (ZooKeeper clusters)"),
		"unserved":   d("idgen_ordered_shards_unserved", "ORDERED shards without a serving owner as this node sees them, for longer than about three leases: no owner, or owned here and not serving (fenced, claim failing); their keys are refused"),
		"cfenced":    d("idgen_ordered_shards_fenced_total", "owned shards given up because the store held a newer epoch that ZooKeeper did not know of (a lost ZooKeeper history, or a second cluster on the database) (ZooKeeper clusters)"),
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
