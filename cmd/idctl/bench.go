package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/pkg/kerrors"

	"github.com/idgen/idgen/client"
	"github.com/idgen/idgen/internal/idctlenv"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// benchConfig is a parsed `idctl bench` command line.
type benchConfig struct {
	addr        string   // what the report names: the --addr list, or zk:SERVERS/CLUSTER
	addrs       []string // static nodes (--addr, comma-separated)
	zk          []string // ZooKeeper ensemble (--zk): the nodes are discovered
	zkRoot      string
	cluster     string
	biz         string
	channel     *idl.Channel // nil: the business's default channel
	count       int          // IDs per request
	concurrency int          // callers, each waiting for its answer before the next request
	duration    time.Duration
	requests    int64 // > 0: bound by a number of requests instead of duration
	warmup      time.Duration
	keys        []string // ORDERED sub keys, rotated per request; nil: none sent
	check       bool
	asJSON      bool
	progress    time.Duration // 0: no progress output
	timeout     time.Duration
	token       string
	zkAuth      string // with zk: the digest credential
	prefetch    bool   // through the client's local prefetch buffer
	// routing reads the client's ORDERED routing counters (cmdBench sets
	// it; nil in tests with a fake call): the report gives their change
	// over the measured phase.
	routing func() client.Stats
}

const (
	defaultBenchDuration = 10 * time.Second
	maxBenchConcurrency  = 10000
	maxBenchKeys         = 1 << 20
	maxBenchCount        = 1 << 20 // the server refuses more than its max_batch anyway
)

const benchSynopsis = "idctl bench [--addr HOST:PORT[,HOST:PORT...] | --zk HOST:PORT,... [--zk-auth-file F]] --biz NAME [--duration D | --requests N] [--prefetch] [flags]"

const benchAbout = `Drives idgen with a bounded load: --concurrency callers on one client,
each sending NextIDs and waiting for the answer, for
--duration or --requests (one of them; an unbounded run is refused).
Reports requests/s, IDs/s, latency percentiles and errors by code.
Requests go through the client package (github.com/idgen/idgen/client)
without retries, so that every failure is counted. With --prefetch they
are served from the client's local prefetch buffer instead (UNORDERED or
SNOWFLAKE, named with --channel), refilled in the background with
retries: a "request" is then one Next/NextN call of the application.

The client reaches the nodes as applications do: --addr takes one node or
a comma-separated list of every node; --zk discovers the members of
--cluster under --zk-root in ZooKeeper (the digest credential of an
ACL-protected cluster is --zk-auth-file or --zk-auth, env IDGEN_ZK_AUTH_FILE
or IDGEN_ZK_AUTH). --addr and --zk are exclusive. With sub keys
(ORDERED) the client sends each request to its shard's owner when it
knows it; the report counts how many requests went to the owner first,
how many elsewhere (the node then forwards them) and how many left the
owner after a failure.

With --check every ID received is kept (about 8 bytes per single ID, a
batch as one range) and checked for duplicates at the end (per sub key when
sub keys are sent: ORDERED numbers are unique per business and key); on
ORDERED (and SLOW_ORDERED, served as ORDERED) each caller's IDs must also
rise strictly per sub key. IDs received
during --warmup are checked too. A failed check exits 1.
`

// parseBenchFlags parses and validates the command line. Errors are
// usageErrors naming the flag.
func parseBenchFlags(args []string, stderr io.Writer) (benchConfig, error) {
	fs := newCmdFlags("bench", benchSynopsis, benchAbout, stderr)
	addr := fs.String("addr", envOr(idctlenv.Addr, defaultAddr), "idgen RPC address, or a comma-separated list of every node (env "+idctlenv.Addr+")")
	zkServers := fs.String("zk", "", "discover the nodes in ZooKeeper: servers host:port,... (exclusive with --addr)")
	cluster, zkRoot := addClusterFlags(fs, "with --zk: ")
	zkAuth := addZKAuthFlags(fs)
	biz := fs.String("biz", "", "business name (required)")
	channel := fs.String("channel", "", channelHelp+" (default: the business's)")
	count := fs.Int("count", 1, "IDs per request (batch size)")
	conc := fs.Int("concurrency", 16, "concurrent callers")
	duration := fs.Duration("duration", defaultBenchDuration, "how long to measure (exclusive with --requests)")
	requests := fs.Int64("requests", 0, "total requests to send instead of a duration")
	warmup := fs.Duration("warmup", 0, "load to send before measuring (not reported; its IDs are still checked)")
	subKey := fs.String("sub-key", "", "ORDERED sub key (default \"bench\"); with --keys, the prefix of the keys")
	keys := fs.Int("keys", 0, "ORDERED: rotate over this many sub keys KEY-0..KEY-(N-1) (0: the one --sub-key)")
	check := fs.Bool("check", false, "keep every ID and verify uniqueness (and per-caller order on ORDERED)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	progress := fs.Duration("progress", time.Second, "interval of progress lines on stderr when it is not a terminal (0: none)")
	quiet := fs.Bool("quiet", false, "no progress output")
	timeout := fs.Duration("timeout", 3*time.Second, "RPC timeout of one request")
	tokens := addOldClientTokenFlags(fs)
	prefetch := fs.Bool("prefetch", false, "measure the prefetching client: IDs come from its local buffer (needs --channel unordered or snowflake)")
	if err := fs.parse(args); err != nil {
		return benchConfig{}, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	bad := func(format string, a ...any) (benchConfig, error) {
		return benchConfig{}, fs.usageErr(format, a...)
	}
	if len(fs.args) > 0 {
		return bad("unexpected argument %q", fs.args[0])
	}
	token, err := tokens.get()
	if err != nil {
		return benchConfig{}, err
	}
	cfg := benchConfig{biz: *biz, count: *count, concurrency: *conc, warmup: *warmup,
		check: *check, asJSON: *asJSON, progress: *progress, timeout: *timeout, token: token, prefetch: *prefetch}
	switch {
	case set["addr"] && set["zk"]:
		return bad("--addr and --zk are exclusive: give the nodes (--addr a,b,c) or the ZooKeeper ensemble to discover them from (--zk)")
	case set["zk"]:
		if cfg.zk = splitList(*zkServers); len(cfg.zk) == 0 {
			return bad("--zk %q: want ZooKeeper servers host:port,...", *zkServers)
		}
		if *cluster == "" || *zkRoot == "" {
			return bad("--zk needs a --cluster and a --zk-root")
		}
		cfg.zkRoot, cfg.cluster = *zkRoot, *cluster
		if cfg.zkAuth, err = zkAuth.get(); err != nil {
			return benchConfig{}, err
		}
		cfg.addr = "zk:" + strings.Join(cfg.zk, ",") + *zkRoot + "/" + *cluster
	default:
		cfg.addrs = splitList(*addr)
		if len(cfg.addrs) == 0 {
			return bad("--addr HOST:PORT is required (or IDGEN_ADDR)")
		}
		for _, a := range cfg.addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return bad("--addr %q: want host:port", a)
			}
		}
		cfg.addr = strings.Join(cfg.addrs, ",")
	}
	switch {
	case (set["zk-root"] || set["cluster"] || set["zk-auth"] || set["zk-auth-file"]) && !set["zk"]:
		return bad("--zk-root, --cluster and --zk-auth(-file) apply to discovery only: give --zk too")
	case cfg.biz == "":
		return bad("--biz is required")
	case cfg.count < 1 || cfg.count > maxBenchCount:
		return bad("--count %d: want 1..%d", cfg.count, maxBenchCount)
	case cfg.concurrency < 1 || cfg.concurrency > maxBenchConcurrency:
		return bad("--concurrency %d: want 1..%d", cfg.concurrency, maxBenchConcurrency)
	case set["duration"] && set["requests"]:
		return bad("--duration and --requests are exclusive: bound the run by one of them")
	case *requests < 0:
		return bad("--requests %d: want a positive number", *requests)
	case set["requests"] && *requests == 0:
		return bad("--requests 0 would be an unbounded run: give a positive number or use --duration")
	case *requests == 0 && *duration <= 0:
		return bad("--duration %v would be an unbounded run: give a positive duration or --requests N", *duration)
	case cfg.warmup < 0:
		return bad("--warmup %v is negative", cfg.warmup)
	case cfg.timeout <= 0:
		return bad("--timeout %v: want a positive duration", cfg.timeout)
	case cfg.progress < 0:
		return bad("--progress %v is negative", cfg.progress)
	case *keys < 0 || *keys > maxBenchKeys:
		return bad("--keys %d: want 0..%d", *keys, maxBenchKeys)
	}
	if *quiet {
		cfg.progress = 0
	}
	if *requests > 0 {
		cfg.requests = *requests
	} else {
		cfg.duration = *duration
	}
	if *channel != "" {
		ch, err := parseChannel(*channel)
		if err != nil {
			return benchConfig{}, fs.withUsage(err)
		}
		cfg.channel = &ch
	}
	if cfg.prefetch && (cfg.channel == nil || *cfg.channel != idl.Channel_UNORDERED && *cfg.channel != idl.Channel_SNOWFLAKE) {
		return bad("--prefetch needs --channel unordered or snowflake (ORDERED is never prefetched)")
	}
	wantKeys := set["sub-key"] || set["keys"]
	if wantKeys && cfg.channel != nil && !strictOrder(cfg.channel) {
		return bad("--sub-key and --keys apply to the ordered channel only (ordered or slow_ordered), not %s", channelName(cfg.channel))
	}
	if wantKeys || strictOrder(cfg.channel) {
		prefix := *subKey
		if prefix == "" {
			prefix = "bench"
		}
		if *keys <= 1 && !set["keys"] {
			cfg.keys = []string{prefix}
		} else {
			cfg.keys = make([]string, max(*keys, 1))
			for i := range cfg.keys {
				cfg.keys[i] = prefix + "-" + strconv.Itoa(i)
			}
		}
	}
	return cfg, nil
}

// splitList splits a comma-separated list, dropping empty items and
// spaces around them.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// channelName is the lowercase channel name, "default" for nil.
func channelName(ch *idl.Channel) string {
	if ch == nil {
		return "default"
	}
	switch *ch {
	case idl.Channel_UNORDERED:
		return "unordered"
	case idl.Channel_ORDERED:
		return "ordered"
	case idl.Channel_SNOWFLAKE:
		return "snowflake"
	case idl.Channel_SLOW_ORDERED:
		return "slow_ordered"
	}
	return ch.String()
}

// nextFunc sends one NextIDs request (the Kitex client, or a fake in tests).
type nextFunc func(ctx context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error)

// cmdBench drives a running server with a bounded load and reports.
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	if err := dialCheckAll(ctx, cfg.addrs); err != nil {
		return err
	}
	c, err := newBenchClient(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	cfg.routing = c.Stats
	call := benchCall(c, cfg)
	res := runBench(ctx, cfg, call, newProgress(stderr, cfg.progress))
	if err := writeBenchResult(stdout, cfg, res); err != nil {
		return err
	}
	return res.verdict()
}

// newBenchClient returns one client for the whole run. It keeps up to
// --concurrency idle connections: Kitex's default pool keeps 10 per
// address, so at 64 callers most requests would open and close a
// connection and the run would measure connection setup.
func newBenchClient(cfg benchConfig) (*client.Client, error) {
	cc := client.Config{Addrs: cfg.addrs, ZK: cfg.zk, ZKRoot: cfg.zkRoot, Cluster: cfg.cluster, Token: cfg.token, RPCTimeout: cfg.timeout, CallTimeout: cfg.timeout,
		ConnectTimeout: time.Second, MaxIdleConns: cfg.concurrency, MaxAttempts: 1}
	if cfg.prefetch {
		// The refills retry; the application's calls are what is measured.
		cc.MaxAttempts = 0
		cc.Prefetch.Bizs = []client.PrefetchBiz{{Biz: cfg.biz, Channel: client.Channel(*cfg.channel)}}
	}
	cc.ZKAuth = cfg.zkAuth
	c, err := client.New(cc)
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// benchCall adapts the client to the benchmark's request/response loop.
func benchCall(c *client.Client, cfg benchConfig) nextFunc {
	var opts []client.CallOption
	if cfg.channel != nil {
		opts = append(opts, client.WithChannel(client.Channel(*cfg.channel)))
	}
	if cfg.prefetch {
		ch := *cfg.channel
		return func(ctx context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
			if req.Count == 1 {
				id, err := c.Next(ctx, req.Biz, opts...)
				if err != nil {
					return nil, err
				}
				return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: id, Last: id}}, Channel: ch, Count: 1}, nil
			}
			rs, err := c.NextN(ctx, req.Biz, int(req.Count), opts...)
			if err != nil {
				return nil, err
			}
			return toResponse(rs, ch, false), nil
		}
	}
	return func(ctx context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		o := opts
		if req.SubKey != nil {
			o = append(o[:len(o):len(o)], client.WithSubKey(*req.SubKey))
		}
		res, err := c.Fetch(ctx, req.Biz, int(req.Count), o...)
		if err != nil {
			return nil, err
		}
		if res.IDs != nil || res.Codes != nil {
			// An obfuscated business: its IDs are as unique as the numbers
			// behind them (a bijection), so --check treats each as a range
			// of one. Codes are counted, not checked.
			rs := make([]client.Range, len(res.IDs))
			for i, id := range res.IDs {
				rs[i] = client.Range{First: id, Last: id}
			}
			resp := toResponse(rs, idl.Channel(res.Channel), res.Fallback)
			resp.Codes = res.Codes
			resp.Count += int64(len(res.Codes))
			return resp, nil
		}
		return toResponse(res.Ranges, idl.Channel(res.Channel), res.Fallback), nil
	}
}

func toResponse(rs []client.Range, ch idl.Channel, fallback bool) *idl.NextIDsResponse {
	resp := &idl.NextIDsResponse{Ranges: make([]*idl.IDRange, len(rs)), Channel: ch, Fallback: fallback}
	for i, r := range rs {
		resp.Ranges[i] = &idl.IDRange{First: r.First, Last: r.Last}
		resp.Count += r.Len()
	}
	return resp
}

// benchWorker is one caller's private tallies, merged after the run so the
// hot loop shares nothing but the progress counters.
type benchWorker struct {
	idx       int
	sent      int64 // requests sent, across phases (rotates the keys)
	ok        int64
	failed    int64
	ids       int64
	fallbacks int64
	hist      *histogram
	errs      map[string]int64
	samples   map[string]string // one message per error code
	// sinks keep the IDs received for --check, one per sub key: ORDERED
	// numbers are unique per (biz, sub key), so each key is its own space.
	// One sink when no sub key is sent.
	sinks   []*idSink
	order   *orderCheck // --check on ORDERED or SLOW_ORDERED
	scratch []idRange
}

// benchRun is one run of the benchmark.
type benchRun struct {
	cfg     benchConfig
	call    nextFunc
	workers []*benchWorker
	tickets atomic.Int64 // requests left in a --requests phase
	// live counters for the progress line only
	liveOK, liveFailed, liveIDs atomic.Int64
}

// runBench runs the warm-up (if any) and the measured phase and returns
// the merged result. It stops early, marking the result interrupted, when
// ctx is cancelled.
func runBench(ctx context.Context, cfg benchConfig, call nextFunc, prog *progress) *benchResult {
	r := &benchRun{cfg: cfg, call: call}
	ordered := strictOrder(cfg.channel)
	for i := 0; i < cfg.concurrency; i++ {
		w := &benchWorker{idx: i, hist: newHistogram(), errs: map[string]int64{}, samples: map[string]string{}}
		if cfg.check {
			w.sinks = make([]*idSink, max(len(cfg.keys), 1))
			for k := range w.sinks {
				w.sinks[k] = &idSink{}
			}
			if ordered {
				w.order = newOrderCheck(max(len(cfg.keys), 1))
			}
		}
		r.workers = append(r.workers, w)
	}
	if cfg.warmup > 0 {
		r.phase(ctx, "warmup", cfg.warmup, 0, false, prog)
	}
	routing := cfg.routing != nil && len(cfg.keys) > 0 // ORDERED: sub keys sent
	var before client.Stats
	if routing {
		before = cfg.routing()
	}
	elapsed := r.phase(ctx, "bench", cfg.duration, cfg.requests, true, prog)
	res := r.result(elapsed, ctx.Err() != nil)
	if routing {
		after := cfg.routing()
		res.Routing = &routingResult{ToOwner: after.OrderedToOwner - before.OrderedToOwner,
			Elsewhere:      after.OrderedElsewhere - before.OrderedElsewhere,
			OwnerFallbacks: after.OrderedOwnerFallbacks - before.OrderedOwnerFallbacks}
	}
	return res
}

// phase runs every worker until the deadline (d > 0) or until requests
// have been sent, and returns the wall time it took (including the last
// in-flight requests, which are counted).
func (r *benchRun) phase(ctx context.Context, name string, d time.Duration, requests int64, record bool, prog *progress) time.Duration {
	r.liveOK.Store(0)
	r.liveFailed.Store(0)
	r.liveIDs.Store(0)
	r.tickets.Store(requests)
	start := time.Now()
	var deadline time.Time
	if requests == 0 {
		deadline = start.Add(d)
	}
	stop := prog.start(name, start, d, requests, &r.liveOK, &r.liveFailed, &r.liveIDs)
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Go(func() { r.loop(ctx, w, deadline, requests > 0, record) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop()
	return elapsed
}

// loop is one caller: send, wait, tally, until the phase ends.
func (r *benchRun) loop(ctx context.Context, w *benchWorker, deadline time.Time, counted, record bool) {
	req := &idl.NextIDsRequest{Biz: r.cfg.biz, Channel: r.cfg.channel, Count: int32(r.cfg.count)}
	if r.cfg.token != "" {
		req.Token = &r.cfg.token
	}
	for ctx.Err() == nil {
		if counted {
			if r.tickets.Add(-1) < 0 {
				return
			}
		} else if !time.Now().Before(deadline) {
			return
		}
		key := 0
		if len(r.cfg.keys) > 0 {
			key = int((int64(w.idx) + w.sent) % int64(len(r.cfg.keys)))
			req.SubKey = &r.cfg.keys[key]
		}
		w.sent++
		t0 := time.Now()
		resp, err := r.call(ctx, req)
		lat := time.Since(t0)
		if err == nil {
			err = w.absorb(resp, key, r.cfg.count)
		} else if ctx.Err() != nil {
			return // interrupted: not the server's failure
		}
		if err != nil {
			r.liveFailed.Add(1)
			if record {
				w.failed++
				code := benchErrorCode(err)
				w.errs[code]++
				if _, ok := w.samples[code]; !ok {
					w.samples[code] = describe(err).Error()
				}
			}
			continue
		}
		r.liveOK.Add(1)
		r.liveIDs.Add(resp.Count)
		if record {
			w.ok++
			w.ids += resp.Count
			w.hist.record(lat)
			if resp.Fallback {
				w.fallbacks++
			}
		}
	}
}

// errBadResponse marks an answer that does not hold what was asked for.
var errBadResponse = errors.New("bad response")

// absorb validates one response and feeds the checks.
func (w *benchWorker) absorb(resp *idl.NextIDsResponse, key, want int) error {
	if resp == nil {
		return fmt.Errorf("%w: empty", errBadResponse)
	}
	var n int64
	w.scratch = w.scratch[:0]
	for _, rg := range resp.Ranges {
		if rg == nil || rg.Last < rg.First {
			return fmt.Errorf("%w: malformed range %v", errBadResponse, rg)
		}
		n += rg.Last - rg.First + 1
		w.scratch = append(w.scratch, idRange{rg.First, rg.Last})
	}
	n += int64(len(resp.Codes))
	if n != int64(want) || resp.Count != n {
		return fmt.Errorf("%w: asked for %d IDs, got ranges of %d and count %d", errBadResponse, want, n, resp.Count)
	}
	if w.sinks != nil {
		sink := w.sinks[key]
		for _, rg := range w.scratch {
			sink.add(rg.first, rg.last)
		}
	}
	if w.order != nil {
		w.order.observe(key, w.scratch)
	}
	return nil
}

// benchErrorCode classifies a failed request: the IdgenError code, or what
// went wrong on the way.
func benchErrorCode(err error) string {
	var ie *idl.IdgenError
	switch {
	case errors.As(err, &ie):
		return ie.Code.String()
	case errors.Is(err, errBadResponse):
		return "BAD_RESPONSE"
	case kerrors.IsTimeoutError(err):
		return "RPC_TIMEOUT"
	case errors.Is(err, kerrors.ErrGetConnection):
		return "CONNECT"
	}
	return "TRANSPORT"
}
