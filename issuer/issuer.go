// Package issuer routes ID requests to the three channels (SNOWFLAKE,
// UNORDERED, ORDERED), applies each business's settings (default channel,
// snowflake fallback, client tokens, request rate and ID quota, output
// mapping) and answers business administration. It knows nothing of Kitex:
// the RPC handler in package server validates the wire request, calls Issuer
// and maps its errors to the IDL exception.
//
// Security-related pieces (issue 19): Next checks the caller's token before
// anything can be created (auth.go); per-node limits bound requests, IDs and
// creation on first use (limits.go); obfuscation keys are stored wrapped by
// a master key held only by the nodes (keys.go, package keywrap); and
// per-business metric labels are capped (BizLabel).
//
// Issuer is the worker.Holder of the node's worker lease: it builds a
// snowflake generator when a slot is acquired, raises its ceiling when the
// slot's high-water mark is extended and drops it when the lease is fenced.
package issuer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/internal/bizlabel"
	"github.com/idgen/idgen/internal/logevery"
	"github.com/idgen/idgen/issuer/keywrap"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/snowflake"
)

// DefaultMaxBatch is the largest count one request may ask for.
const DefaultMaxBatch = 10000

// Errors of the issuer itself (domain packages have their own sentinels).
var (
	// ErrInvalid: the request is malformed; the message says which field.
	ErrInvalid = errors.New("invalid argument")
	// ErrNoWorker: the node holds no worker slot (starting, fenced). Retryable.
	ErrNoWorker = errors.New("no worker slot held")
	// ErrRateLimited: the business is over its per-node rate. Retryable.
	ErrRateLimited = errors.New("rate limited")
)

// Config wires an Issuer. Store, Unordered, Ordered and Bizs are required.
type Config struct {
	Store     segment.Store
	Unordered *segment.Unordered
	Ordered   OrderedTaker
	Bizs      *segment.BizCache
	// Layout is the cluster's snowflake layout; Guard is the rollback guard
	// shared by every generator this node builds.
	Layout snowflake.Layout
	Guard  *clock.Guard
	// Floor is the smallest snowflake ID of this cluster (Layout.Floor of its
	// creation time); only used to tell callers of ParseID what an ID is.
	Floor int64
	// AutoCreateBiz creates unknown businesses on first use with default
	// settings (standalone default). Creation is bounded: see
	// AutoCreateMax, AutoCreatePerSec and AutoCreateBurst.
	AutoCreateBiz bool
	// AutoCreateMax stops auto-creation once the store holds this many
	// businesses (of any origin): callers inventing names would otherwise
	// grow the store and every per-business structure without limit.
	// 0 means DefaultAutoCreateMax (256), not "no limit": a deployment that
	// needs more businesses creates them with 'idctl biz create' or raises
	// this. Negative is refused.
	AutoCreateMax int
	// MasterKey wraps the businesses' obfuscation keys in the store (see
	// package keywrap). nil: new keys are stored plain, and a wrapped key
	// cannot be used (ErrMasterKey).
	MasterKey *keywrap.Key
	// ClientToken is the cluster's shared client token, required on every
	// request for a business without tokens of its own ("" none). Businesses
	// with their own tokens (CreateBizToken) accept only those.
	ClientToken string
	// MetricsMaxBizs caps the distinct business label values of the
	// per-business metrics (BizLabel); later businesses are counted as
	// "_other". 0 means bizlabel.DefaultMax (1000); negative is refused.
	MetricsMaxBizs int
	// Labels, when set, is the cap to use instead of a new one of
	// MetricsMaxBizs: the embedding server shares it with the plugins
	// (stats) it builds before the issuer, so they cap the same businesses.
	Labels *bizlabel.Cap
	// Clock times the rate limits and ID quotas; nil: the Guard's clock.
	Clock    clock.Clock
	MaxBatch int // zero: DefaultMaxBatch; at most segment.MaxBatch
	// NoSegments, when set, says why this deployment has no shared counter
	// store: UNORDERED, ORDERED and snowflake fallback are refused at once
	// with an error wrapping segment.ErrNoSegments and this reason, and
	// businesses cannot be created with those channels or fallback.
	NoSegments error
	// ExtendNow asks the worker lease to write the next high-water mark at
	// once (non-blocking); the generators call it near or past the mark.
	ExtendNow func()
	// Extensions holds custom strategies and rejection handlers (package
	// ext); nil: the built-ins only. New adds the built-in strategies to it
	// (channels 0..3 must be free).
	Extensions *ext.Registry
	Logger     *zap.Logger // nil: no logs
}

// Issuer serves ID requests. It is safe for concurrent use.
type Issuer struct {
	cfg Config
	log *zap.Logger

	gen      atomic.Pointer[snowflake.Generator]
	fence    atomic.Pointer[fenceState]
	lastUsed atomic.Int64 // exact last-used ms of stopped generators
	// everAcquired: a slot was held once (fenced, not starting, since).
	everAcquired atomic.Bool
	limits       sync.Map // biz name -> *bizLimits
	ext          *ext.Registry
	rejections   *prometheus.CounterVec
	rateLimited  *prometheus.CounterVec
	outputs      sync.Map // biz name -> *output, once it has issued
	keys         sync.Map // biz name -> *plainKey
	plugins      pluginState
	clk          clock.Clock
	labels       *bizlabel.Cap
	auto         autoCreate
	chans        channelGate
	// clientTokenHash is SHA-256 of Config.ClientToken (nil: none).
	clientTokenHash []byte
}

type fenceState struct{ reason error }

// New returns an Issuer. Snowflake requests fail with ErrNoWorker until the
// worker lease calls Acquired.
func New(cfg Config) (*Issuer, error) {
	switch {
	case cfg.Store == nil:
		return nil, fmt.Errorf("issuer: Config.Store is required")
	case cfg.Unordered == nil:
		return nil, fmt.Errorf("issuer: Config.Unordered is required")
	case cfg.Ordered == nil:
		return nil, fmt.Errorf("issuer: Config.Ordered is required")
	case cfg.Bizs == nil:
		return nil, fmt.Errorf("issuer: Config.Bizs is required")
	}
	cfg.Layout = cfg.Layout.Normalize()
	if err := cfg.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("issuer: Config.Layout: %w", err)
	}
	if cfg.Guard == nil {
		cfg.Guard = clock.NewGuard(clock.GuardConfig{}, 0)
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxBatch > segment.MaxBatch {
		return nil, fmt.Errorf("issuer: max_batch %d is above %d, the largest batch the segment channels serve: lower max_batch", cfg.MaxBatch, segment.MaxBatch)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Extensions == nil {
		cfg.Extensions = ext.NewRegistry()
	}
	if cfg.AutoCreateMax < 0 {
		return nil, fmt.Errorf("issuer: auto_create_max %d is negative: want 0 (the default, %d) or more (turn auto-creation off instead)", cfg.AutoCreateMax, DefaultAutoCreateMax)
	}
	if cfg.AutoCreateMax == 0 {
		cfg.AutoCreateMax = DefaultAutoCreateMax
	}
	if cfg.MetricsMaxBizs < 0 {
		return nil, fmt.Errorf("issuer: metrics_max_bizs %d is negative: want 0 (the default, %d) or more", cfg.MetricsMaxBizs, bizlabel.DefaultMax)
	}
	if cfg.Clock == nil {
		cfg.Clock = cfg.Guard.Clock()
	}
	is := &Issuer{cfg: cfg, log: cfg.Logger, ext: cfg.Extensions, clk: cfg.Clock,
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_strategy_rejections_total",
			Help: "Refusals of a strategy (before any rejection handler such as the snowflake fallback served)."}, []string{"strategy"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_rate_limited_total",
			Help: "Requests refused by a business's per-node limit: limit is requests (rate_limit) or ids (id_quota). Business labels beyond the cap are _other."},
			[]string{"biz", "limit"}),
		plugins: newPluginState(), labels: cfg.Labels, auto: autoCreate{max: cfg.AutoCreateMax}}
	is.auto.logs = logevery.New(autoCreateLogEvery, is.clk.Now)
	is.chans = newChannelGate(is.clk.Now)
	if is.labels == nil {
		is.labels = bizlabel.New(cfg.MetricsMaxBizs)
	}
	if cfg.ClientToken != "" {
		h := sha256.Sum256([]byte(cfg.ClientToken))
		is.clientTokenHash = h[:]
	}
	if err := is.registerBuiltins(cfg.Extensions); err != nil {
		return nil, err
	}
	is.fence.Store(&fenceState{reason: errNotAcquired})
	return is, nil
}

// Layout returns the snowflake layout.
func (is *Issuer) Layout() snowflake.Layout { return is.cfg.Layout }

// Guard returns the rollback guard (readiness reads Behind from it).
func (is *Issuer) Guard() *clock.Guard { return is.cfg.Guard }

// Collectors returns the issuer's own metrics (strategy refusals, plugin
// failures, rate-limit refusals) for the assembly to register.
func (is *Issuer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{is.rejections, is.plugins.failures, is.rateLimited, is.chans.refused}
}

// BizLabel returns the label value of business name for per-business
// metrics: the name for the first Config.MetricsMaxBizs businesses this
// node sees, "_other" (bizlabel.Other) after. The server and plugins use it
// too, so every per-business series shares one cap.
func (is *Issuer) BizLabel(name string) string { return is.labels.Label(name) }

// MaxBatch returns the largest count a request may ask for.
func (is *Issuer) MaxBatch() int { return is.cfg.MaxBatch }

// Request asks for Count IDs of Biz.
type Request struct {
	Biz       string
	Channel   *segment.Channel // nil: the business's default
	Count     int
	SubKey    string // ORDERED only, required there
	RequestID string // ORDERED only, optional
	// Caller is the caller's address, passed to the plugins (optional).
	Caller string
	// Token is the client's credential: one of the business's own tokens,
	// or the shared client token (Config.ClientToken).
	Token string
	// PlainOnly refuses, before anything is allocated or counted, a
	// business whose output is not plain integers (obfuscated IDs, codes):
	// set by the callers whose answer can carry only a range (the
	// OrderedTake hop of older nodes), so that such a business's raw
	// counters never leave the node.
	PlainOnly bool
}

// Response carries the IDs as inclusive ranges or, for a business whose
// output is not a plain range, as IDs or codes (one per number, Ranges nil).
type Response struct {
	Ranges   []segment.Range
	IDs      []int64         // obfuscated integers
	Codes    []string        // codes (format code)
	Channel  segment.Channel // the channel that served
	Fallback bool            // SNOWFLAKE refused and the business's segment served
	// Refusal is why SNOWFLAKE refused when Fallback is true.
	Refusal error
}

// Count returns the number of IDs in r.
func (r Response) Count() int64 {
	if r.IDs != nil || r.Codes != nil {
		return int64(len(r.IDs) + len(r.Codes))
	}
	var n int64
	for _, rg := range r.Ranges {
		n += rg.Len()
	}
	return n
}

// OrderedTaker serves the ORDERED strategy: perrequest.Processor (one store
// statement per request) or a node's shard owners (package ordered, through
// the server's forwarding router).
type OrderedTaker interface {
	Take(ctx context.Context, biz segment.Biz, subKey string, n int64, rid segment.RequestID) (segment.Range, error)
}

// Next issues IDs for req. It is the one policy path (issue 30): every
// request that hands out numbers, whatever RPC or node it arrived by, is
// validated (max_batch, sub key), authorized, counted by the business's rate
// limit and ID quota, seen by its plugins and mapped to its output format
// here, exactly once, on the node that answers it. A node that forwards an
// ORDERED request to the shard's owner forwards the whole request and
// relays the answer; it does not call Next for it.
func (is *Issuer) Next(ctx context.Context, req Request) (Response, error) {
	if err := is.validate(req); err != nil {
		return Response{}, err
	}
	biz, err := is.biz(ctx, req.Biz, req.Token, req.Channel)
	if err != nil {
		return Response{}, err
	}
	if req.PlainOnly && !biz.PlainOutput() {
		return Response{}, fmt.Errorf("%w: business %q hands out %s, which a plain range cannot carry: send NextIDs (OrderedTake is the hop of nodes older than issue 30; upgrade them)",
			ErrInvalid, biz.Name, outputName(biz))
	}
	ch := biz.Channel
	if req.Channel != nil {
		ch = *req.Channel
	}
	if err := is.checkChannel(biz, ch); err != nil {
		return Response{}, err
	}
	if isOrdered(ch) && req.SubKey == "" {
		return Response{}, fmt.Errorf("%w: sub_key is required on channel %s (it names the sequence, e.g. a chat id)", ErrInvalid, is.channelName(ch))
	}
	if !isOrdered(ch) && (req.SubKey != "" || req.RequestID != "") {
		return Response{}, fmt.Errorf("%w: sub_key and request_id are only used on the ORDERED channels (1 and 3), not on channel %s", ErrInvalid, is.channelName(ch))
	}
	if err := is.allow(biz, req.Count); err != nil {
		return Response{}, err
	}
	ps, set := is.pluginsOf(biz)
	var call *ext.Call
	if ps != nil {
		call = &ext.Call{Biz: pluginView(biz, set), Channel: ch, Count: req.Count, SubKey: req.SubKey, RequestID: req.RequestID,
			Caller: req.Caller, Worker: is.Worker(), Start: time.Now()}
		if err := is.runBefore(ctx, ps, call); err != nil {
			is.runOnError(ctx, ps, call, err)
			return Response{}, err
		}
	}
	out, res, err := is.serve(ctx, biz, ch, req)
	if ps != nil {
		// Plugins see the numbers before the output mapping, and a copy:
		// nothing they do can change what the caller gets.
		if err != nil {
			is.runOnError(ctx, ps, call, err)
		} else {
			is.runAfter(ctx, ps, call, res)
		}
	}
	if err != nil {
		return Response{}, err
	}
	resp := Response{Ranges: res.Ranges, Channel: res.Channel, Fallback: res.Fallback, Refusal: res.Refusal}
	out.apply(&resp)
	return resp, nil
}

// serve locks the business's output (marking it issued) and runs the
// strategy of ch with the rejection chain.
func (is *Issuer) serve(ctx context.Context, biz segment.Biz, ch segment.Channel, req Request) (*output, ext.Result, error) {
	out, err := is.outputOf(ctx, biz)
	if err != nil {
		return nil, ext.Result{}, err
	}
	var scope string
	if req.RequestID != "" { // only ids are scoped: no hash on the other requests' path
		scope = RequestScope(req.Token)
	}
	res, err := is.ext.Serve(ctx, ext.Request{Biz: biz, Channel: ch, Count: req.Count, SubKey: req.SubKey, RequestID: req.RequestID,
		RequestScope: scope},
		ext.RejectionFunc(is.logRejection), ext.RejectionFunc(is.snowflakeFallback))
	return out, res, err
}

// noSegments is the refusal of a segment channel in a deployment without
// a shared counter store.
func (is *Issuer) noSegments(what string) error {
	return fmt.Errorf("%s refused: %w: %v", what, segment.ErrNoSegments, is.cfg.NoSegments)
}

// Refusal reports whether err is snowflake refusing to serve for now (clock
// rollback or jump, no worker slot, waiting past the slot's mark, stopped):
// the cases a business's fallback covers.
func Refusal(err error) bool {
	return errors.Is(err, clock.ErrRollback) || errors.Is(err, ErrNoWorker) || errors.Is(err, snowflake.ErrClockJump) ||
		errors.Is(err, snowflake.ErrNotYet) || errors.Is(err, snowflake.ErrStopped)
}

func (is *Issuer) snowflakeRanges(n int) ([]segment.Range, error) {
	g := is.gen.Load()
	if g == nil {
		return nil, fmt.Errorf("%w: %v", ErrNoWorker, is.fence.Load().reason)
	}
	rs, err := g.NextN(n)
	if err != nil {
		return nil, err
	}
	out := make([]segment.Range, len(rs))
	for i, r := range rs {
		out[i] = segment.Range{First: r.First, Last: r.Last}
	}
	return out, nil
}

func (is *Issuer) validate(req Request) error {
	if err := segment.ValidateBizName(req.Biz); err != nil {
		return err
	}
	if req.Count < 1 {
		return fmt.Errorf("%w: count %d: ask for at least 1 ID", ErrInvalid, req.Count)
	}
	if req.Count > is.cfg.MaxBatch {
		return fmt.Errorf("%w: count %d is above max_batch %d (larger batches are refused, not clamped: split the request)", ErrInvalid, req.Count, is.cfg.MaxBatch)
	}
	if req.Channel != nil && !is.ext.Has(*req.Channel) {
		return fmt.Errorf("%w: unknown channel %d: want %s", ErrInvalid, *req.Channel, is.channelChoices())
	}
	if len(req.SubKey) > segment.MaxSubKeyLen {
		return fmt.Errorf("%w: sub_key is %d bytes, at most %d", ErrInvalid, len(req.SubKey), segment.MaxSubKeyLen)
	}
	if len(req.RequestID) > segment.MaxRequestIDLen {
		return fmt.Errorf("%w: request_id is %d bytes, at most %d", ErrInvalid, len(req.RequestID), segment.MaxRequestIDLen)
	}
	return nil
}

// biz looks the business up and checks the request's token, creating the
// business on first use when configured, with the request's channel ch
// (nil: none named) as its default (autoChannels). The token is checked
// before anything is created: a caller without the client token cannot
// create businesses.
func (is *Issuer) biz(ctx context.Context, name, token string, ch *segment.Channel) (segment.Biz, error) {
	b, err := is.cfg.Bizs.Get(ctx, name)
	if err == nil {
		return b, is.authorize(&b, token)
	}
	if !errors.Is(err, segment.ErrUnknownBiz) {
		return b, err
	}
	// An unknown business is treated as one without tokens: the caller
	// needs the client token to learn that it does not exist, or to have
	// it created.
	if aerr := is.authorize(nil, token); aerr != nil {
		return segment.Biz{}, aerr
	}
	if !is.cfg.AutoCreateBiz {
		return segment.Biz{}, err
	}
	release, err := is.reserveAutoCreate(ctx, name)
	if err != nil {
		return segment.Biz{}, err
	}
	def, chs := autoChannels(ch)
	if is.cfg.NoSegments != nil {
		// Only SNOWFLAKE can serve here (checkChannels, checkChannel).
		def, chs = segment.ChannelSnowflake, nil
	}
	b, err = is.cfg.Store.CreateBiz(ctx, segment.Biz{Name: name, Channel: def, Channels: chs, Fallback: is.cfg.NoSegments == nil,
		Description: "created on first use", Key: is.mustStoredKey(name)})
	if err != nil {
		release()
	}
	if errors.Is(err, segment.ErrBizExists) {
		// Created meanwhile (another node, or a racing request): it may
		// have tokens by now, so check again.
		is.cfg.Bizs.Invalidate(name)
		if b, err = is.cfg.Bizs.Get(ctx, name); err != nil {
			return b, err
		}
		return b, is.authorize(&b, token)
	}
	if err != nil {
		return segment.Biz{}, err
	}
	is.logAutoCreated(name)
	is.cfg.Bizs.Invalidate(name)
	return b, nil
}

// mustStoredKey is the key of an auto-created business: wrapped with a
// master key, else left to the store (nil). Wrapping a fresh key cannot
// fail; if it did, the store's plain key is still usable.
func (is *Issuer) mustStoredKey(name string) segment.SecretKey {
	k, err := is.storedKey(name, nil)
	if err != nil {
		return nil
	}
	return k
}

// JumpRetryAfter is the retry hint of a forward clock jump: about one write
// of the high-water mark, which the generator has already asked for.
const JumpRetryAfter = 50 * time.Millisecond

// RetryAfter suggests how long a caller should wait before retrying after
// a retryable err (0 when there is no better hint than "soon"). Hints come
// from values captured in the error, so they do not drift with the clock.
func (is *Issuer) RetryAfter(err error) time.Duration {
	var rb *clock.RollbackError
	var we *snowflake.WaitError
	var le *LimitError
	switch {
	case errors.As(err, &le):
		return le.RetryAfter
	case errors.As(err, &rb):
		return rb.Behind
	case errors.As(err, &we):
		return we.RetryAfter()
	case errors.Is(err, snowflake.ErrClockJump):
		return JumpRetryAfter
	case errors.Is(err, ErrRateLimited):
		return 100 * time.Millisecond
	case errors.Is(err, ErrNoWorker), errors.Is(err, snowflake.ErrStopped):
		return time.Second
	}
	return 0
}
