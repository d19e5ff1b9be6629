// Command idgen is the ID service: a Kitex/Thrift server handing out
// SNOWFLAKE, UNORDERED and ORDERED IDs, with an admin HTTP port for
// /metrics, /healthz and /readyz.
//
// With no configuration it runs standalone: no ZooKeeper, no MySQL, data
// under ./data. --zk switches on ZooKeeper worker registration and --mysql
// the MySQL segment store.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote/codec"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/issuer"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgen"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/boltstore"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/snowflake"
	"github.com/idgen/idgen/worker"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// started is when this process started (reported by ListWorkers standalone).
var started = time.Now()

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idgen:", err)
		os.Exit(1)
	}
}

// run builds every dependency explicitly, serves until ctx is cancelled and
// closes things in reverse order.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := loadConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	klog.SetLevel(klog.LevelWarn)

	// Bind both ports first: a port in use fails the start before any slot
	// is claimed.
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

	store, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer store.Close()

	guard := clock.NewGuard(clock.GuardConfig{Clock: clk, MaxBackwardWait: cfg.MaxBackwardWait,
		Logger: log.Named("clock"), OnReject: m.clockRejected}, 0)

	layout := cfg.Layout()
	holder := &lateHolder{}
	rpcPort := rpcLn.Addr().(*net.TCPAddr).Port
	lease, err := startLease(ctx, cfg, layout, holder, clk, rpcPort, log)
	if err != nil {
		return err
	}
	leaseClosed := false
	closeLease := func() {
		if leaseClosed {
			return
		}
		leaseClosed = true
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lease.Close(cctx); err != nil {
			log.Error("closing the worker lease", zap.Error(err))
		}
	}
	defer closeLease()
	meta := lease.Meta()
	floor := layout.Floor(meta.CreatedMs)

	unordered, err := segment.NewUnordered(segment.UnorderedConfig{Store: store, Logger: log.Named("unordered"),
		Floor: floor, MaxStep: cfg.MaxStep, SegmentDuration: cfg.SegmentTTL, OnLoad: m.segmentLoaded})
	if err != nil {
		return err
	}
	defer unordered.Close()
	ordered, err := segment.NewOrdered(segment.OrderedConfig{Store: store, Timeout: cfg.StoreTimeout, Logger: log.Named("ordered")})
	if err != nil {
		return err
	}
	is, err := issuer.New(issuer.Config{Store: store, Unordered: unordered, Ordered: ordered,
		Bizs: segment.NewBizCache(store, 2*time.Second), Layout: layout, Guard: guard, Floor: floor,
		AutoCreateBiz: cfg.AutoCreate(), MaxBatch: cfg.MaxBatch, Logger: log.Named("issuer")})
	if err != nil {
		return err
	}
	holder.attach(is)

	st := &nodeState{is: is, lease: lease}
	h := &handler{is: is, log: log.Named("rpc"), clk: clk, cluster: cfg.Cluster, adminToken: cfg.AdminToken,
		clientToken: cfg.ClientToken, state: st.String, workers: workersFunc(cfg, lease, rpcPort), m: m}
	m.register(is, unordered, lease, st)

	admin := &http.Server{Handler: adminMux(st, m, debugRoutes), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := admin.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin HTTP server stopped", zap.Error(err))
		}
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = admin.Shutdown(sctx)
	}()

	exit := make(chan error, 1)
	svr := idgensvc.NewServer(h,
		server.WithListener(rpcLn),
		server.WithServerBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: "idgen"}),
		server.WithCodec(codec.NewDefaultCodecWithSizeLimit(cfg.MaxFrameBytes)),
		server.WithExitWaitTime(cfg.ShutdownTimeout),
		server.WithExitSignal(func() <-chan error { return exit }),
	)
	log.Info("idgen serving", zap.String("rpc_addr", rpcLn.Addr().String()), zap.String("admin_addr", adminLn.Addr().String()),
		zap.Bool("standalone", cfg.Standalone()), zap.String("cluster", cfg.Cluster), zap.String("version", version),
		zap.Int64("snowflake_floor", floor), zap.String("state", st.String()))
	runErr := make(chan error, 1)
	go func() { runErr <- svr.Run() }()

	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight calls", zap.Duration("timeout", cfg.ShutdownTimeout))
		exit <- nil
		err = <-runErr
	case err = <-runErr:
		if err != nil {
			err = fmt.Errorf("rpc server: %w", err)
		}
	}
	// In-flight calls are done: record the exact high-water mark and free
	// the slot before the store closes.
	closeLease()
	log.Info("idgen stopped", zap.Int64("last_used_ms", is.LastUsed()))
	return err
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

// openStore opens the MySQL store with --mysql, else the embedded store.
func openStore(ctx context.Context, cfg Config, log *zap.Logger) (segment.Store, error) {
	if cfg.MySQL != "" {
		s, err := mysqlstore.Open(ctx, mysqlstore.Config{DSN: cfg.MySQL, MaxOpenConns: cfg.MySQLMaxConns,
			Timeout: cfg.StoreTimeout, Logger: log.Named("mysql")})
		if err != nil {
			return nil, fmt.Errorf("mysql: %w", err)
		}
		return s, nil
	}
	s, err := boltstore.Open(cfg.DataDir, boltstore.Options{Logger: log.Named("store")})
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	return s, nil
}

// startLease claims the worker slot: through ZooKeeper with --zk, else from
// configuration and the properties file.
func startLease(ctx context.Context, cfg Config, layout snowflake.Layout, h worker.Holder, clk clock.Clock, port int, log *zap.Logger) (worker.Lease, error) {
	layout = layout.Normalize()
	want := worker.Meta{EpochMs: layout.EpochMs(), IDCBits: layout.IDCBits, NodeBits: layout.NodeBits}
	propsDir := cfg.PropertiesDir
	if propsDir == "" {
		propsDir = cfg.DataDir
	}
	host := advertiseHost(cfg)
	if cfg.ZK == "" {
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
	l, err := worker.Register(ctx, worker.Config{Servers: strings.Split(cfg.ZK, ","), Root: cfg.ZKRoot, Cluster: cfg.Cluster,
		IDC: cfg.IDC, App: "idgen", Host: host, Port: port, PropertiesDir: propsDir, Meta: want,
		SessionTimeout: cfg.ZKSessionTimeout, HeartbeatInterval: cfg.Heartbeat, AllowCachedSlotWithoutZK: worker.Bool(cfg.AllowCachedSlot),
		MaxPeerClockSkew: cfg.MaxPeerSkew, PeerClock: peerClock, Auth: cfg.ZKAuth, Clock: clk, Holder: h,
		Version: version, Logger: log.Named("worker")})
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
