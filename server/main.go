// Package server is the idgen server: a Kitex/Thrift server handing out
// SNOWFLAKE, UNORDERED and ORDERED IDs, with an admin HTTP port for
// /metrics, /healthz and /readyz. cmd/idgen is its default assembly
// (server.Main with no options); a Go program embeds the whole server with
// its own strategies and plugins through Options.Register, without a fork:
//
//	func main() {
//		server.Main(server.Options{Register: func(r *ext.Registry) error {
//			return r.RegisterStrategy(16, myStrategy)
//		}})
//	}
//
// With no configuration it runs standalone: no ZooKeeper, no MySQL, data
// under ./data. --zk switches on ZooKeeper worker registration and
// cluster-wide businesses, --mysql the MySQL segment store (and, without
// --zk, MySQL-held worker slots). Every combination is safe with many nodes
// or refused at start; see README, "Configurations".
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/internal/bizlabel"
	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/issuer/keywrap"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/perrequest"
	"github.com/idgen/idgen/plugins"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/boltstore"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/segment/zkguard"
	"github.com/idgen/idgen/segment/zkstore"
	"github.com/idgen/idgen/snowflake"
	"github.com/idgen/idgen/worker"
	"github.com/idgen/idgen/worker/mysqllease"
)

// version is what the node reports (Clock, ListWorkers, logs): the
// Options.Version of the running binary, which ./build.sh stamps from git.
var version = "dev"

// Options customise an embedded server. The zero value is the default
// assembly (cmd/idgen).
type Options struct {
	// Version is reported by --version, the Clock RPC and the logs.
	Version string
	// Register, when set, is called with the node's registry after the
	// built-in strategies (channels 0..3) and plugins (audit, stats) are
	// registered: add custom strategies, rejection handlers and plugins
	// there. An error stops the start.
	Register func(*ext.Registry) error
	// KitexLogsToZap routes Kitex's own log lines through the node's zap
	// logger. Kitex's logger is one per process and may only be replaced
	// before anything in the process uses Kitex, so Main sets it and an
	// embedding program decides for itself. netpoll's own log lines
	// ("NETPOLL: ...", process-wide too) go the same way, named "netpoll".
	KitexLogsToZap bool
	// KitexOptions are extra Kitex server options for the RPC server,
	// applied after idgen's own: tracing (server.WithTracer with a
	// stats.Tracer, or server.WithSuite with a suite such as
	// kitex-contrib/obs-opentelemetry's tracing.NewServerSuite()),
	// middlewares (server.WithMiddleware), QPS limits
	// (server.WithQPSLimiter), a service registry (server.WithRegistry) and
	// the like. examples/embed shows a middleware and a tracer.
	//
	// The listener, the transport and the codec are idgen's (rpc_addr, TLS,
	// the max_connections cap, the max_frame_bytes limit and the peer
	// address rule are built into them), and so is the exit signal (the
	// graceful shutdown): Run refuses to start with an option that sets
	// WithListener, WithServiceAddr, WithProxy, WithTransServerFactory,
	// WithTransHandlerFactory, WithMuxTransport, WithCodec or
	// WithExitSignal, and, with TLS, a connection limit (WithLimit's
	// MaxConnections, WithConnectionLimiter: Kitex's Go net transport never
	// releases it). Any other option applies on top of idgen's, a later
	// value replacing an earlier one: WithExitWaitTime replaces
	// shutdown_timeout, WithServerBasicInfo the service name "idgen" that
	// tracers report, WithMaxConnIdleTime the keep-alive interval;
	// WithBoundHandler adds a handler after idgen's connection cap.
	KitexOptions []server.Option
}

// started is when this process started (reported by ListWorkers standalone).
var started = time.Now()

// Main runs the server with the process's arguments and environment until
// SIGINT or SIGTERM, and exits non-zero on a failure: the body of a main
// function.
func Main(opts Options) {
	ctx, stop := signalContext(os.Interrupt, syscall.SIGTERM)
	opts.KitexLogsToZap = true
	err := Run(ctx, opts, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, errHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "idgen:", err)
		os.Exit(1)
	}
}

// Run builds every dependency explicitly, serves until ctx is cancelled and
// closes things in reverse order.
//
// Both servers answer from the first moment: the admin port reports
// "starting" and NextIDs answers a retryable code while the store opens and
// the worker slot is claimed, so a restart never looks like a hang.
//
// Run is Main without the process: it serves until ctx is cancelled, with
// args as the command line and getenv as the environment.
func Run(ctx context.Context, opts Options, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if opts.Version != "" {
		version = opts.Version
	}
	cfg, err := loadConfig(args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if opts.KitexLogsToZap {
		setKitexLogger(log.Named("kitex"))
	}
	for _, k := range unknownEnv(os.Environ()) {
		log.Warn("environment variable names no idgen setting: ignored (misspelt?)", zap.String("variable", k),
			zap.String("fix", "see idgen --help for the IDGEN_* names"))
	}
	warnOpenDirs(cfg, log) // datadir.go
	// Before any listener: Options.KitexOptions that would replace idgen's
	// own server options are refused (kitexopts.go).
	if err := checkKitexOptions(opts.KitexOptions, cfg.TLSCert != ""); err != nil {
		return err
	}
	// Before any listener: a node never serves admin RPCs without a token.
	adminToken, err := adminTokenFor(cfg, log)
	if err != nil {
		return err
	}

	rpcLn, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		return fmt.Errorf("rpc_addr: %w", err)
	}
	defer rpcLn.Close()
	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin_addr: %w", err)
	}
	defer adminLn.Close()

	clk, debugRoutes := newClock()
	m := newMetrics()
	nd := newNode(clk, cfg)
	nd.register = opts.Register
	nd.access.admin = adminToken // configured or generated: /status needs it too (status.go)
	nd.setStarting("opening the segment store and claiming a worker slot")

	rpcTr, err := newRPCTransport(cfg, rpcLn, m.reg, log.Named("transport"))
	if err != nil {
		return err
	}
	defer rpcTr.close()
	adminLim := defaultAdminLimits()
	admin, adminServeLn, err := newAdminServer(adminLn, adminMux(nd, m, debugRoutes, adminLim, log), adminLim, m.reg, log)
	if err != nil {
		return err
	}
	go func() {
		if err := admin.Serve(adminServeLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin HTTP server stopped", zap.Error(err))
		}
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = admin.Shutdown(sctx)
	}()

	h := &handler{node: nd, log: log.Named("rpc"), clk: clk, cluster: cfg.Cluster, adminToken: adminToken,
		clientToken: cfg.ClientToken, m: m, auth: newAuthFailures(log.Named("auth"), m)}
	exit := make(chan error, 1)
	// The listener, codec, transport and connection limits: transport.go.
	// Options.KitexOptions come last (checked at the top of Run).
	svr := idgensvc.NewServer(h, append(append(rpcTr.options(),
		server.WithServerBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: "idgen"}),
		server.WithExitWaitTime(cfg.ShutdownTimeout),
		server.WithExitSignal(func() <-chan error { return exit }),
	), opts.KitexOptions...)...)
	runErr := make(chan error, 1)
	go func() { runErr <- svr.Run() }()
	stopRPC := func() error {
		exit <- nil
		return <-runErr
	}
	log.Info("idgen starting", zap.String("rpc_addr", rpcLn.Addr().String()), zap.String("admin_addr", adminLn.Addr().String()),
		zap.String("mode", cfg.Mode()), zap.String("cluster", cfg.Cluster), zap.String("version", version))

	closeAll, err := nd.start(ctx, cfg, clk, m, rpcLn.Addr().(*net.TCPAddr).Port, log)
	if err != nil {
		_ = stopRPC()
		return err
	}
	h.workers = nd.workers
	log.Info("idgen serving", zap.String("mode", cfg.Mode()), zap.Int64("snowflake_floor", nd.floor),
		zap.String("state", nd.String()), zap.Duration("startup", time.Since(started)))

	select {
	case <-ctx.Done():
		logStopping(ctx, log)
		// ORDERED shards first, while this node still answers: each
		// hand-off stops the shard, writes back its exact counters and
		// releases it, so the next owner continues without a gap and
		// requests forwarded here meanwhile get a retryable refusal.
		nd.handOffShards()
		log.Info("shutting down: draining in-flight calls", zap.Duration("timeout", cfg.ShutdownTimeout))
		err = stopRPC()
	case err = <-runErr:
		if err != nil {
			err = fmt.Errorf("rpc server: %w", err)
		}
	}
	// In-flight calls are done: record the exact high-water mark and free
	// the slot before the store closes.
	closeAll()
	return err
}

// start opens the store, claims the worker slot and builds the issuer, then
// makes the node serve. The returned func closes everything in reverse
// order (lease first, so the exact mark is written while the process still
// knows it).
func (nd *node) start(ctx context.Context, cfg Config, clk clock.Clock, m *metrics, rpcPort int, log *zap.Logger) (func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (func(), error) {
		closeAll()
		return nil, err
	}

	// zs is the node's one ZooKeeper session (nil without --zk): every
	// guard below takes it, none closes it; it is closed after all of
	// them (closers run in reverse). Not waited for here: the worker lease
	// decides how long to wait (and may start degraded without ZooKeeper).
	var zs *zksession.Session
	var inc *incarnationCheck
	if cfg.ZK != "" {
		warnOpenZooKeeper(cfg, m, log)
		warnUnwitnessedZooKeeper(cfg, m, log)
		inc = newIncarnationCheck(cfg, rpcPort, zksession.ErrRefused, log)
		var err error
		if zs, err = openSession(cfg, inc, log); err != nil {
			return fail(err)
		}
		nd.zk.Store(zs)
		closers = append(closers, zs.Close)
		stop := inc.TouchEvery(cfg.Heartbeat, zs, log)
		closers = append(closers, stop)
	}
	nd.setStarting("opening the segment store")
	store, noSegments, err := openStore(ctx, cfg, zs, log)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = store.Close() })
	if inc != nil {
		inc.setStore(store)
	}
	ms, _ := store.(*mysqlstore.Store)
	var repl *replicationWatch
	if ms != nil {
		m.setDurability(ms.Durability())
		repl = startReplicationWatch(ctx, ms, m, log.Named("mysql"))
		closers = append(closers, repl.close)
	}

	guard := clock.NewGuard(clock.GuardConfig{Clock: clk, MaxBackwardWait: cfg.MaxBackwardWait,
		Logger: log.Named("clock"), OnReject: m.clockRejected, OnJump: m.clockJumped}, 0)
	layout := cfg.Layout()
	holder := &worker.LateHolder{Fault: faultSlot} // the identity outside faultinject builds (holder_*.go)
	nd.setStarting("claiming a worker slot")
	lease, err := startLease(ctx, cfg, layout, holder, clk, rpcPort, store, zs, inc, log)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lease.Close(cctx); err != nil {
			log.Error("closing the worker lease", zap.Error(err))
		}
		log.Info("idgen stopped", zap.Int64("last_used_ms", holder.LastUsed()))
	})
	meta := lease.Meta()
	floor := layout.Floor(meta.CreatedMs)
	if ms != nil && faultNoClusterBinding() {
		log.Error("IDGEN_FAULT_NO_CLUSTER_BINDING=1: the database's cluster binding is not checked (fault injection's negative control)")
	} else if ms != nil {
		// One database, one cluster: refused before anything serves from
		// it (segment/mysqlstore/binding.go).
		nd.setStarting("checking the database belongs to this cluster")
		b, err := ms.BindCluster(ctx, cfg.Cluster, meta.CreatedMs, fmt.Sprintf("%s:%d", advertiseHost(cfg), rpcPort))
		if err != nil {
			return fail(fmt.Errorf("mysql: %w", err))
		}
		log.Info("the database belongs to this cluster", zap.String("cluster", b.Cluster), zap.Int64("created_ms", b.CreatedMs),
			zap.String("bound_by", b.BoundBy), zap.Time("bound_at", b.BoundAt))
	}

	// The cross-node guard against a lossy MySQL failover needs what the
	// nodes share besides MySQL: ZooKeeper.
	var (
		replGuard *zkguard.Guard
		ledger    segment.Ledger
		gate      segment.Gate
	)
	if ms != nil && cfg.ZK != "" {
		if replGuard, err = startGuard(cfg, ms, repl, rpcPort, zs, log); err != nil {
			return fail(err)
		}
		closers = append(closers, replGuard.Close)
		ledger, gate = replGuard, replGuard
	} else if ms != nil {
		log.Warn("no --zk: no cross-node guard against a lossy MySQL failover (each node guards only its own history); run MySQL with semi-synchronous AFTER_SYNC replication or Galera, or add --zk",
			zap.String("replication", string(repl.cur.Load().Verdict)))
	}

	unordered, err := segment.NewUnordered(segment.UnorderedConfig{Store: store, Logger: log.Named("unordered"),
		Floor: floor, MaxStep: cfg.MaxStep, SegmentDuration: cfg.SegmentTTL, OnLoad: m.segmentLoaded, OnWait: m.segmentWaited, Ledger: ledger})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = unordered.Close() })
	// ORDERED: shard owners answering from memory where the deployment
	// can elect them (ZooKeeper leases; a standalone node owns every
	// shard), one store statement per request otherwise (see orderedPath).
	var (
		orderedTaker issuer.OrderedTaker
		remembered   func(fn func(biz, sub string, last int64))
		requests     func(fn func(ordered.Request)) // nil: the per-request path stores ids with each statement
		regressions  func() uint64
		own          *owners
	)
	if path := orderedPath(cfg, store, noSegments); path == orderedOwners {
		nd.setStarting("joining the ORDERED shard owners (the shards are claimed after start)")
		ownStore, _ := orderedStore(store)       // orderedOwners: there is one
		lossless := func() bool { return false } // no replication watch: nothing read, nothing proven
		if repl != nil {
			lossless = repl.safe
		}
		if own, err = startOwners(ctx, cfg, ownStore, gate, lossless, rpcPort, zs, m, log.Named("ordered")); err != nil {
			return fail(err)
		}
		closers = append(closers, own.close)
		nd.handOff = own.close
		orderedTaker, remembered, requests = own, own.alloc.Remembered, own.alloc.RememberedRequests
		regressions = func() uint64 { return own.alloc.Stats().Regressions }
	} else {
		po, err := perrequest.New(perrequest.Config{Store: store, Timeout: cfg.StoreTimeout, Logger: log.Named("ordered"), Gate: gate})
		if err != nil {
			return fail(err)
		}
		if path == orderedPerRequestNoZK {
			log.Info("ORDERED: one MySQL statement per request (no --zk: shard owners need ZooKeeper leases); every business is served as gapless")
		}
		orderedTaker, remembered = po, po.Remembered
		regressions = func() uint64 { return po.Stats().Regressions }
	}
	if replGuard != nil {
		replGuard.StartBarrier(ms, zkguard.Repair{Flush: flushRemembered(remembered, requests, ms),
			Remembered: func() []segment.OrderedMark { return segment.Marks(remembered) }, Raise: ms.RaiseOrdered})
		nd.gate = replGuard
		// The first round takes a ZooKeeper round trip or two; not waited
		// for when the lease could not reach ZooKeeper either.
		wait := 3 * time.Second
		if lease.State() == worker.StateDegraded {
			wait = 0
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		if !replGuard.WaitOpen(wctx) {
			log.Warn("ORDERED waits for the cluster's barrier (ZooKeeper unreachable, or another node has not raised its rows yet); it opens by itself, at most --ordered-barrier-wait after start")
		}
		cancel()
	}
	m.reg.MustRegister(guardCollector{g: replGuard, ms: ms, u: unordered, orderedRegressions: regressions})
	var masterKey *keywrap.Key
	if cfg.MasterKeyFile != "" {
		if masterKey, err = keywrap.Load(cfg.MasterKeyFile); err != nil {
			return fail(fmt.Errorf("master_key_file: %w", err))
		}
		// The fingerprint, never the key: every node of a cluster must log
		// the same one.
		log.Info("business keys are wrapped by the master key", zap.String("file", cfg.MasterKeyFile), zap.String("master_key_id", masterKey.ID()))
	}
	// One cap on per-business series for the issuer and the stats plugin.
	labels := bizlabel.New(cfg.MetricsMaxBizs)
	exts, closeExts, err := defaultExtensions(cfg, m, fmt.Sprintf("%s:%d", advertiseHost(cfg), rpcPort), nd.register, labels.Label, log)
	if err != nil {
		return fail(err)
	}
	// Closed after the RPC server drained (closers run in reverse, before
	// the lease and the store): the last requests' records are flushed.
	closers = append(closers, closeExts)
	is, err := issuer.New(issuer.Config{Store: store, Unordered: unordered, Ordered: orderedTaker,
		Bizs: segment.NewBizCache(store, 2*time.Second), Layout: layout, Guard: guard, Floor: floor,
		AutoCreateBiz: cfg.AutoCreate(), MaxBatch: cfg.MaxBatch, NoSegments: noSegments,
		ExtendNow: lease.RequestExtend, Extensions: exts, Logger: log.Named("issuer"),
		MasterKey: masterKey, ClientToken: cfg.ClientToken, AutoCreateMax: cfg.AutoCreateMax, Labels: labels})
	if err != nil {
		return fail(err)
	}
	if masterKey != nil {
		// Keys stored plain before the master key was configured are
		// wrapped now (the same key, so no output changes). A key this
		// master key cannot open means the wrong file: refuse to start.
		n, err := is.WrapKeys(ctx)
		if err != nil {
			return fail(fmt.Errorf("master_key_file %s: %w", cfg.MasterKeyFile, err))
		}
		if n > 0 {
			log.Info("wrapped business keys stored in the clear", zap.Int("businesses", n))
		}
	}
	holder.Attach(is)
	health := newStoreHealth(store)
	closers = append(closers, health.close)
	nd.ready(is, unordered, own, lease, health, noSegments, floor, workersFunc(cfg, lease, rpcPort))
	m.register(nd)
	m.reg.MustRegister(is.Collectors()...)
	return closeAll, nil
}

// defaultExtensions is the default assembly's registry: the built-in
// plugins audit (to cfg.AuditPath()) and stats, their metrics registered
// with the node's registry. The returned func flushes and closes the audit
// file.
func defaultExtensions(cfg Config, m *metrics, servedBy string, register func(*ext.Registry) error, bizLabel func(string) string,
	log *zap.Logger) (*ext.Registry, func(), error) {
	reg := ext.NewRegistry()
	audit, err := plugins.OpenAudit(cfg.AuditPath(), plugins.AuditConfig{ServedBy: servedBy, Logger: log.Named("audit")})
	if err != nil {
		return nil, nil, fmt.Errorf("audit_file %s: %w", cfg.AuditPath(), err)
	}
	closeAudit := func() {
		if err := audit.Close(5 * time.Second); err != nil {
			log.Error("closing the audit file", zap.String("file", cfg.AuditPath()), zap.Error(err))
		}
	}
	stats := plugins.NewStats(plugins.StatsLabels(bizLabel))
	for _, p := range []ext.Plugin{audit, stats} {
		if err := reg.RegisterPlugin(p); err != nil {
			closeAudit()
			return nil, nil, err
		}
	}
	m.reg.MustRegister(audit.Collectors()...)
	m.reg.MustRegister(stats.Collectors()...)
	if register != nil {
		// Custom strategies of an embedding program. The built-in
		// strategies are added by issuer.New, which refuses a registry
		// whose channels 0..3 are taken.
		if err := register(reg); err != nil {
			closeAudit()
			return nil, nil, fmt.Errorf("registering custom strategies and plugins: %w", err)
		}
	}
	return reg, closeAudit, nil
}

func newLogger(cfg Config, stderr io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, fmt.Errorf("log_level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder = zapcore.NewJSONEncoder(enc)
	if cfg.LogFormat == "console" {
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.AddSync(stderr), lvl)), nil
}

// errNoSegmentsZK is why a ZooKeeper-only cluster refuses the segment channels.
var errNoSegmentsZK = errors.New("this cluster runs with --zk and no --mysql: UNORDERED, ORDERED and snowflake fallback need a shared counter store; start every node with --mysql DSN, or use SNOWFLAKE without fallback")

// openStore opens the store for the configuration:
//   - --mysql: the MySQL store (businesses and counters shared by every node);
//   - --zk alone: businesses in ZooKeeper, no counters (noSegments says why);
//   - neither: the embedded store under data_dir (one node per data dir).
func openStore(ctx context.Context, cfg Config, zs *zksession.Session, log *zap.Logger) (segment.Store, error, error) {
	switch {
	case cfg.MySQL != "":
		s, err := mysqlstore.Open(ctx, mysqlstore.Config{DSN: cfg.MySQL, MaxOpenConns: cfg.MySQLMaxConns,
			Timeout: cfg.StoreTimeout, AcceptUnsafeDurability: cfg.MySQLAcceptUnsafe, Logger: log.Named("mysql")})
		if err != nil {
			return nil, nil, fmt.Errorf("mysql: %w", err)
		}
		return s, nil, nil
	case cfg.ZK != "":
		s, err := zkstore.Open(ctx, zkstore.Config{Session: zs, Servers: strings.Split(cfg.ZK, ","), Root: cfg.ZKRoot, Cluster: cfg.Cluster,
			Auth: cfg.ZKAuth, SessionTimeout: cfg.ZKSessionTimeout, Timeout: cfg.StoreTimeout, Logger: log.Named("zkstore")})
		if err != nil {
			return nil, nil, fmt.Errorf("zk business store: %w", err)
		}
		log.Warn("no --mysql: businesses are kept in ZooKeeper; UNORDERED, ORDERED and snowflake fallback are refused on this cluster",
			zap.String("fix", "start every node with --mysql DSN"))
		return s, errNoSegmentsZK, nil
	}
	s, err := boltstore.Open(cfg.DataDir, boltstore.Options{Logger: log.Named("store")})
	if errors.Is(err, boltstore.ErrDirInUse) {
		// Two standalone nodes on one data dir would share one worker
		// slot and one counter file: refuse, naming the fix.
		return nil, nil, fmt.Errorf("--data-dir %s: %w; give every standalone node its own --data-dir (IDGEN_DATA_DIR), or run a cluster with --zk and --mysql", cfg.DataDir, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--data-dir %s: %w", cfg.DataDir, err)
	}
	return s, nil, nil
}

// openSession opens the node's one ZooKeeper session (--zk), shared by
// every guard. Its "no server explains the refusals" rule waits out the
// worker lease's lead, after which the lease's marks have run out anyway.
// Config.Check is the cluster incarnation check (server/incarnation.go).
func openSession(cfg Config, inc *incarnationCheck, log *zap.Logger) (*zksession.Session, error) {
	lead := worker.Config{SessionTimeout: cfg.ZKSessionTimeout, HeartbeatInterval: cfg.Heartbeat, OutageTolerance: cfg.OutageTolerance}.Lead()
	zs, err := zksession.Start(zksession.Config{Servers: strings.Split(cfg.ZK, ","), SessionTimeout: cfg.ZKSessionTimeout,
		Auth: cfg.ZKAuth, Lead: lead, Logger: log.Named("zk"),
		Check: func(ctx context.Context, c zksession.ZK) (bool, string, error) { return inc.Check(ctx, c) }})
	if err != nil {
		return nil, fmt.Errorf("zk: %w", err)
	}
	return zs, nil
}

// startLease claims the worker slot: through ZooKeeper with --zk, through
// the MySQL worker table with --mysql alone, else from configuration and
// the properties file (standalone).
func startLease(ctx context.Context, cfg Config, layout snowflake.Layout, h worker.Holder, clk clock.Clock, port int,
	store segment.Store, zs *zksession.Session, inc *incarnationCheck, log *zap.Logger) (worker.Lease, error) {
	layout = layout.Normalize()
	want := worker.Meta{EpochMs: layout.EpochMs(), IDCBits: layout.IDCBits, NodeBits: layout.NodeBits}
	propsDir := cfg.PropertiesDir
	if propsDir == "" {
		propsDir = cfg.DataDir
	}
	host := advertiseHost(cfg)
	switch {
	case cfg.ZK != "":
		l, err := worker.Register(ctx, worker.Config{Session: zs, Servers: strings.Split(cfg.ZK, ","), Root: cfg.ZKRoot, Cluster: cfg.Cluster,
			IDC: cfg.IDC, App: "idgen", Host: host, Port: port, PropertiesDir: propsDir, Meta: want,
			SessionTimeout: cfg.ZKSessionTimeout, HeartbeatInterval: cfg.Heartbeat, OutageTolerance: cfg.OutageTolerance,
			AllowCachedSlotWithoutZK: worker.Bool(cfg.AllowCachedSlot),
			MaxPeerClockSkew:         cfg.MaxPeerSkew, PeerClock: peerClock(cfg.ClientToken), Auth: cfg.ZKAuth, Clock: clk, Holder: h,
			AfterClaim: inc.AfterClaim(zs), Version: version, Logger: log.Named("worker")})
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		if ms, ok := store.(*mysqlstore.Store); ok {
			// Record in MySQL that this cluster's slots are held in
			// ZooKeeper, and refuse if they are held in MySQL: two
			// registries could put one worker on two nodes. Checked with the
			// slot held (before SNOWFLAKE serves), so a migration that
			// started meanwhile sees the claim or is seen here.
			if err := mysqllease.ClaimRegistry(ctx, ms.DB(), cfg.Cluster, mysqllease.RegistryZooKeeper, l.Meta()); err != nil {
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = l.Close(cctx)
				cancel()
				return nil, fmt.Errorf("worker: %w", err)
			}
		}
		return l, nil
	case cfg.MySQL != "":
		ms, ok := store.(*mysqlstore.Store)
		if !ok {
			return nil, fmt.Errorf("worker: --mysql without --zk needs the MySQL store")
		}
		l, err := mysqllease.Register(ctx, mysqllease.Config{DB: ms.DB(), Cluster: cfg.Cluster, IDC: cfg.IDC, Host: host, Port: port,
			Meta: want, HeartbeatInterval: cfg.Heartbeat, OutageTolerance: cfg.OutageTolerance, MaxClockSkew: cfg.MaxPeerSkew,
			Clock: clk, Holder: h, Version: version, Logger: log.Named("worker")})
		if err != nil {
			return nil, fmt.Errorf("worker (MySQL-held slots): %w", err)
		}
		return l, nil
	}
	meta, err := worker.LocalMeta(cfg.DataDir, want, clk.Now())
	if err != nil {
		return nil, err
	}
	l, err := worker.Standalone(worker.StandaloneConfig{PropertiesDir: propsDir, Cluster: cfg.Cluster, App: "idgen", Host: host, Port: port,
		IDC: cfg.IDC, Node: cfg.Node, Meta: meta, HeartbeatInterval: cfg.Heartbeat, Clock: clk, Holder: h,
		Logger: log.Named("worker")})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return l, nil
}

// advertiseHost is the host written into the member znode: peers dial it
// for the clock check and operators read it in 'idctl workers'.
func advertiseHost(cfg Config) string {
	if cfg.AdvertiseHost != "" {
		return cfg.AdvertiseHost
	}
	if host, _, err := net.SplitHostPort(cfg.RPCAddr); err == nil && host != "" && host != "0.0.0.0" && host != "::" {
		return host
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return "127.0.0.1"
}
