package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/trans/gonet"
	"github.com/cloudwego/kitex/pkg/remote/trans/netpoll"
	"github.com/cloudwego/kitex/server"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/logevery"
)

// Descriptor budget. Every RPC connection is a file descriptor, and so is
// everything else the node needs to keep its promises: the ZooKeeper
// session, the properties file it rewrites on every heartbeat, the bolt
// store, the audit file, the admin HTTP port, the MySQL pool. A flood of
// RPC connections must not take those from it, or the heartbeat fails and
// the node gives up its worker slot; so RPC connections get what is left
// after a reserve:
//
//	reserve = fdReserveBase + adminMaxConns + adminProbeConns + mysql_max_conns (with --mysql)
//
// fdReserveBase covers the listeners, ZooKeeper, the store and audit files,
// the properties file and its temporary copy, logs and Go runtime pipes
// with room to spare; adminMaxConns and adminProbeConns are the admin
// port's own connection caps (admin.go), counted separately because a
// scraper flood can hold all of them at once.
const (
	fdReserveBase = 64
	// minRPCConns is the fewest RPC connections worth starting with: below
	// it a handful of clients with pooled connections lock everyone out.
	minRPCConns = 16
	// refusalLogEvery bounds the refused-connection log to one line per
	// interval (with the count since the last line); the counter
	// idgen_rpc_connections_refused_total is exact.
	refusalLogEvery = 10 * time.Second
)

// raiseNofile raises RLIMIT_NOFILE's soft limit to the hard limit and
// returns the soft limit in force afterwards. (Go's runtime already does
// this at start on Linux since Go 1.19; doing it here makes it explicit,
// logged, and independent of the runtime's choice.)
func raiseNofile(log *zap.Logger) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	before := lim.Cur
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			log.Warn("cannot raise the open-file soft limit to the hard limit; RPC connections are sized from the soft limit",
				zap.Uint64("soft", lim.Cur), zap.Uint64("hard", lim.Max), zap.Error(err))
			return lim.Cur, nil
		}
		lim = want
	}
	log.Info("open-file limit", zap.Uint64("soft_before", before), zap.Uint64("soft", lim.Cur), zap.Uint64("hard", lim.Max))
	return lim.Cur, nil
}

// fdReserve is the descriptors kept back from RPC connections; see
// fdReserveBase.
func fdReserve(cfg Config) int {
	r := fdReserveBase + adminMaxConns + adminProbeConns
	if cfg.MySQL != "" {
		r += cfg.MySQLMaxConns
	}
	return r
}

// effectiveMaxConns is min(max_connections, nofile - reserve), or an error
// naming the fix when that leaves fewer than minRPCConns.
func effectiveMaxConns(cfg Config, nofile uint64) (int, error) {
	reserve := fdReserve(cfg)
	avail := math.MaxInt32
	if nofile < math.MaxInt32 {
		avail = int(nofile) - reserve
	}
	// A max_connections below minRPCConns is the operator's choice; a
	// descriptor limit forcing it is a misconfiguration.
	if avail < minRPCConns {
		return 0, fmt.Errorf("max_connections: the open-file limit %d minus the %d descriptors kept for the node's own work (ZooKeeper, MySQL pool, files, admin port) leaves %d RPC connections, fewer than %d: raise the limit (ulimit -n, systemd LimitNOFILE=, or the container's nofile) or lower mysql_max_conns",
			nofile, reserve, max(avail, 0), minRPCConns)
	}
	return min(cfg.MaxConns, avail), nil
}

// rpcTransport is the RPC port's transport: netpoll in plaintext, Go's net
// with crypto/tls when TLS is configured (netpoll cannot do TLS), both with
// the same connection cap, idle reaping, metrics and peer-address rule.
type rpcTransport struct {
	name     string // "netpoll" or "gonet+tls"
	opts     []server.Option
	tracker  *connTracker
	stopOnce sync.Once
	stop     chan struct{}
}

// newRPCTransport sizes the connection cap from the open-file limit, builds
// the TLS listener when configured and returns the Kitex options of the
// RPC server (listener, codec, transport, limits).
//
// Why not Kitex's own limits: server.WithLimit's connection limiter is
// released in OnInactive, which Kitex v0.16.3's gonet transport server
// never calls (pkg/remote/trans/gonet/trans_server.go serveConn), so on the
// TLS transport it would count every connection ever accepted and lock all
// clients out after max_connections of them; and server.WithMaxConnIdleTime
// is, on netpoll, only a TCP keep-alive interval (netpoll
// connection.SetIdleTimeout calls SetKeepAlive), which never closes an idle
// but live client, while on gonet it is raised to at least 2 minutes. So
// connTracker does both: on netpoll through an inbound bound handler
// (OnActive refuses, OnInactive forgets; netpoll calls OnInactive from the
// connection's close callback), on gonet in a listener below TLS.
// WithMaxConnIdleTime is still set: on netpoll it turns on keep-alive
// probes, which find dead peers.
//
// Idle means "no completed call", not "no byte" (issue 30): when every
// byte read counted, a ClientHello trickled a byte at a time held a TLS
// slot until Kitex's own 2-minute deadline, whatever conn_idle_timeout
// said. The same inbound handler runs on both transports (Kitex builds one
// pipeline whatever the transport); its OnMessage runs once per decoded
// call, never for a half-read frame, with the context OnActive returned,
// which carries the connection's tracker entry. And no one source address
// holds more than max_connections_per_source of the slots, so one host's
// flood (issue 30: 1,000 clients from one address took all 896) leaves the
// rest for everyone else.
func newRPCTransport(cfg Config, ln net.Listener, reg prometheus.Registerer, log *zap.Logger) (*rpcTransport, error) {
	nofile, err := raiseNofile(log)
	if err != nil {
		return nil, err
	}
	maxConns, err := effectiveMaxConns(cfg, nofile)
	if err != nil {
		return nil, err
	}
	t := &rpcTransport{stop: make(chan struct{})}
	perSource := perSourceConns(cfg, maxConns)
	t.tracker = newConnTracker(maxConns, perSource, cfg.ConnIdleTimeout, log)
	if err := t.tracker.register(reg); err != nil {
		return nil, err
	}
	cdc, err := newServerCodec(cfg.MaxFrameBytes, reg, log)
	if err != nil {
		return nil, err
	}
	t.opts = []server.Option{
		server.WithCodec(cdc),
		server.WithMaxConnIdleTime(cfg.ConnIdleTimeout),
	}
	mutual := false
	if cfg.TLSCert != "" {
		tc, err := serverTLSConfig(cfg)
		if err != nil {
			return nil, err
		}
		mutual = tc.ClientAuth == tls.RequireAndVerifyClientCert
		t.name = "gonet+tls"
		t.opts = append(t.opts,
			server.WithListener(tls.NewListener(&limitListener{Listener: ln, t: t.tracker}, tc)),
			server.WithTransServerFactory(gonet.NewTransServerFactory()),
			server.WithTransHandlerFactory(gonet.NewSvrTransHandlerFactory()),
			server.WithBoundHandler(&connInbound{t: t.tracker, gonet: true}))
	} else {
		t.name = "netpoll"
		// Kitex's default netpoll handler also detects gRPC (HTTP/2) and
		// TTHeader streaming and serves idgen's methods through their own
		// codecs, which boundedCodec never sees (a CreateBiz over h2c
		// with a 2^31-1 list killed the node): only the ping-pong Thrift
		// handler is served, as on the TLS port.
		t.opts = append(t.opts, server.WithListener(ln), server.WithBoundHandler(&connInbound{t: t.tracker}),
			server.WithTransHandlerFactory(netpoll.NewSvrTransHandlerFactory()))
	}
	go t.tracker.reap(t.stop)
	log.Info("rpc transport", zap.String("transport", t.name), zap.Bool("tls", cfg.TLSCert != ""), zap.Bool("mutual_tls", mutual),
		zap.Int("max_connections", maxConns), zap.Int("max_connections_configured", cfg.MaxConns), zap.Int("max_connections_per_source", perSource),
		zap.Uint64("open_file_limit", nofile), zap.Int("fd_reserve", fdReserve(cfg)), zap.Duration("conn_idle_timeout", cfg.ConnIdleTimeout))
	return t, nil
}

// options are the Kitex server options of the transport.
func (t *rpcTransport) options() []server.Option { return t.opts }

// close stops the idle reaper (after the server stopped).
func (t *rpcTransport) close() { t.stopOnce.Do(func() { close(t.stop) }) }

// serverTLSConfig loads the certificate and, with tls_client_ca, requires
// client certificates signed by that CA. TLS 1.2 is the floor; Go
// negotiates 1.3 whenever the client offers it.
func serverTLSConfig(cfg Config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("tls_cert %s / tls_key %s: %w (want a PEM certificate chain and its PEM private key)", cfg.TLSCert, cfg.TLSKey, err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls_client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_client_ca %s: no PEM certificate found in it", cfg.TLSClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// perSourceConns is the per-source cap in force: max_connections_per_source,
// or with 0 a quarter of the effective cap (at least 1), never more than
// the cap itself.
func perSourceConns(cfg Config, maxConns int) int {
	n := cfg.MaxConnsPerSource
	if n <= 0 {
		n = max(maxConns/4, 1)
	}
	return min(n, maxConns)
}

// sourceOf is the address a connection counts against for the per-source
// cap: its IP, or for IPv6 its /64 (one host commonly holds a whole /64, so
// per-address counting would let it open a slot per address).
func sourceOf(a net.Addr) string {
	var ip net.IP
	switch v := a.(type) {
	case *net.TCPAddr:
		ip = v.IP
	default:
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return a.String()
		}
		ip = net.ParseIP(host)
		if ip == nil {
			return host
		}
	}
	if ip4 := ip.To4(); ip4 != nil {
		return ip4.String()
	}
	return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}

// connTracker caps the RPC connections held at once, overall and per source
// address, closes connections that completed no request for the idle
// timeout, and counts all of it for /metrics.
type connTracker struct {
	max       int
	perSource int
	idle      time.Duration
	log       *zap.Logger
	now       func() time.Time // tests set a fake clock

	open     atomic.Int64
	conns    sync.Map // io.Closer (the connection) -> *connEntry
	byRemote sync.Map // remote address string -> *connEntry (gonet: OnActive sees the TLS conn, not ours)

	mu       sync.Mutex
	bySource map[string]int // connections held per sourceOf

	refused       prometheus.Counter
	sourceRefused prometheus.Counter
	idleClosed    prometheus.Counter
	logs          *logevery.Limiter // keys "refused", "source" and "accept"
}

// connEntry is one held connection: when it last completed a request (or
// was accepted) and what it counts against.
type connEntry struct {
	last   atomic.Int64 // Unix ns
	source string
	remote string
}

// connEntryKey is the context key under which OnActive leaves the
// connection's *connEntry for OnMessage.
type connEntryKey struct{}

func newConnTracker(maxConns, perSource int, idle time.Duration, log *zap.Logger) *connTracker {
	return &connTracker{max: maxConns, perSource: perSource, idle: idle, log: log, logs: logevery.New(refusalLogEvery, nil),
		bySource: map[string]int{}, now: time.Now,
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_rpc_connections_refused_total",
			Help: "RPC connections closed at accept because max_connections (after the descriptor reserve) were held."}),
		sourceRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_rpc_connections_source_refused_total",
			Help: "RPC connections closed at accept because their source address (IPv4 address, IPv6 /64) held max_connections_per_source."}),
		idleClosed: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_rpc_connections_idle_closed_total",
			Help: "RPC connections closed by the server after conn_idle_timeout without completing a request (bytes that never make a whole call do not count)."}),
	}
}

func (t *connTracker) register(reg prometheus.Registerer) error {
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idgen_rpc_connections",
		Help: "RPC connections held now."}, func() float64 { return float64(t.open.Load()) })
	limit := prometheus.NewGauge(prometheus.GaugeOpts{Name: "idgen_rpc_connections_max",
		Help: "Most RPC connections held at once: min(max_connections, open-file limit - reserve)."})
	limit.Set(float64(t.max))
	perSource := prometheus.NewGauge(prometheus.GaugeOpts{Name: "idgen_rpc_connections_per_source_max",
		Help: "Most RPC connections one source address holds at once (max_connections_per_source)."})
	perSource.Set(float64(t.perSource))
	for _, c := range []prometheus.Collector{t.refused, t.sourceRefused, t.idleClosed, open, limit, perSource} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering RPC connection metrics: %w", err)
		}
	}
	return nil
}

// admit takes a slot for c, coming from remote, or counts a refusal (at
// the global or the per-source cap) and reports false.
func (t *connTracker) admit(c interface{ Close() error }, remote net.Addr) (*connEntry, bool) {
	e := &connEntry{source: sourceOf(remote), remote: remote.String()}
	t.mu.Lock()
	if t.open.Load() >= int64(t.max) {
		t.mu.Unlock()
		t.refuse()
		return nil, false
	}
	if t.bySource[e.source] >= t.perSource {
		t.mu.Unlock()
		t.refuseSource(e.source)
		return nil, false
	}
	t.bySource[e.source]++
	t.open.Add(1)
	t.mu.Unlock()
	e.completed(t.now())
	t.conns.Store(c, e)
	t.byRemote.Store(e.remote, e)
	return e, true
}

// forget frees c's slot if it held one.
func (t *connTracker) forget(c interface{ Close() error }) {
	v, ok := t.conns.LoadAndDelete(c)
	if !ok {
		return
	}
	e := v.(*connEntry)
	t.byRemote.CompareAndDelete(e.remote, e)
	t.mu.Lock()
	if t.bySource[e.source]--; t.bySource[e.source] <= 0 {
		delete(t.bySource, e.source)
	}
	t.open.Add(-1)
	t.mu.Unlock()
}

// completed marks a request completed on e at now (admit marks the accept
// the same way, so a new connection has the idle timeout to complete one).
func (e *connEntry) completed(now time.Time) { e.last.Store(now.UnixNano()) }

// refuse counts a refused connection and logs at most one line per
// refusalLogEvery, with the number refused since the previous line.
func (t *connTracker) refuse() {
	t.refused.Inc()
	ok, held := t.logs.Allow("refused")
	if !ok {
		return
	}
	n := int64(held) + 1 // this one and those held back since the last line
	t.log.Warn("refusing RPC connections: max_connections held (callers see the connection closed)",
		zap.Int64("refused_since_last_line", n), zap.Int("max_connections", t.max),
		zap.String("fix", "raise max_connections and the open-file limit, or have clients pool fewer connections; idgen_rpc_connections_refused_total counts them all"))
}

// refuseSource counts a connection refused at the per-source cap and logs
// at most one line per refusalLogEvery (naming the source of the refusal
// that line reports; the key is fixed, so sources cannot grow the limiter).
func (t *connTracker) refuseSource(source string) {
	t.sourceRefused.Inc()
	ok, held := t.logs.Allow("source")
	if !ok {
		return
	}
	t.log.Warn("refusing RPC connections: one source address holds max_connections_per_source (callers see the connection closed)",
		zap.String("source", source), zap.Int("refused_since_last_line", held+1), zap.Int("max_connections_per_source", t.perSource),
		zap.String("fix", "if this source is a legitimate proxy or NAT, raise max_connections_per_source; else it is flooding the port. idgen_rpc_connections_source_refused_total counts them all"))
}

// reap closes connections that completed no request for t.idle until stop
// is closed.
func (t *connTracker) reap(stop <-chan struct{}) {
	every := max(t.idle/4, 10*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			t.reapAt(now)
		}
	}
}

// reapAt closes the connections that completed no request since now - idle.
func (t *connTracker) reapAt(now time.Time) {
	cut := now.Add(-t.idle).UnixNano()
	t.conns.Range(func(k, v any) bool {
		if v.(*connEntry).last.Load() < cut {
			t.idleClosed.Inc()
			_ = k.(interface{ Close() error }).Close()
			// Forgotten here too: gonet closes through the
			// wrapper, but a conn closed under netpoll's feet may
			// take a moment to reach OnInactive.
			t.forget(k.(interface{ Close() error }))
		}
		return true
	})
}

// connInbound is connTracker's inbound handler. On netpoll, OnActive runs
// for every accepted connection before Kitex reads from it and admits it;
// returning an error makes netpoll close it (and netpoll then calls
// OnInactive from the close callback, which forgets nothing for a refused
// connection since admit did not store it). On gonet the listener below
// TLS admitted it already, and OnActive only finds its entry. On both,
// OnMessage marks a completed request.
type connInbound struct {
	t     *connTracker
	gonet bool
}

var errConnLimit = errors.New("max_connections held: connection refused")

var _ remote.InboundHandler = (*connInbound)(nil)

func (h *connInbound) OnActive(ctx context.Context, conn net.Conn) (context.Context, error) {
	if h.gonet {
		if v, ok := h.t.byRemote.Load(conn.RemoteAddr().String()); ok {
			ctx = context.WithValue(ctx, connEntryKey{}, v.(*connEntry))
		}
		return ctx, nil
	}
	e, ok := h.t.admit(conn, conn.RemoteAddr())
	if !ok {
		return ctx, errConnLimit
	}
	return context.WithValue(ctx, connEntryKey{}, e), nil
}

func (h *connInbound) OnInactive(ctx context.Context, conn net.Conn) context.Context {
	if !h.gonet {
		h.t.forget(conn)
	}
	return ctx
}

func (h *connInbound) OnRead(ctx context.Context, conn net.Conn) (context.Context, error) {
	return ctx, nil
}

// OnMessage runs once per decoded call, before the handler.
func (h *connInbound) OnMessage(ctx context.Context, args, result remote.Message) (context.Context, error) {
	if e, ok := ctx.Value(connEntryKey{}).(*connEntry); ok {
		e.completed(h.t.now())
	}
	return ctx, nil
}

// limitListener is the gonet side of connTracker, below TLS: a connection
// over a cap is closed at accept (before any handshake work), and the
// reaper closes a connection that completed no call in time, including one
// that never finished its handshake.
type limitListener struct {
	net.Listener
	t *connTracker
}

func (l *limitListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			// Kitex's gonet server stops serving on any Accept error
			// (trans_server.go BootstrapServer), so a transient one (out
			// of descriptors, a connection reset before it was accepted)
			// is waited out here, as net/http does, instead of taking the
			// RPC port down.
			if !transientAcceptErr(err) {
				return nil, err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.t.acceptFailed(err, backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc := &trackedConn{Conn: c, t: l.t}
		if _, ok := l.t.admit(tc, c.RemoteAddr()); !ok {
			_ = c.Close()
			continue
		}
		return tc, nil
	}
}

// transientAcceptErr reports whether an Accept error passes by itself.
func transientAcceptErr(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// acceptFailed logs a transient Accept failure, rate-limited like refusals.
func (t *connTracker) acceptFailed(err error, wait time.Duration) {
	if ok, _ := t.logs.Allow("accept"); !ok {
		return
	}
	t.log.Error("accepting RPC connections failed: retrying", zap.Error(err), zap.Duration("wait", wait),
		zap.String("fix", "out of descriptors: raise the open-file limit or lower max_connections"))
}

// trackedConn frees its slot when Kitex (or the reaper) closes it.
type trackedConn struct {
	net.Conn
	t      *connTracker
	closed atomic.Bool
}

func (c *trackedConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.t.forget(c)
	return c.Conn.Close()
}
