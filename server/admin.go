package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/logevery"
)

// adminMaxConns caps the admin port's connections held at once for any
// request; adminProbeConns more are kept for /healthz and /readyz alone.
// Both are part of the descriptor reserve kept from RPC connections
// (transport.go).
const (
	adminMaxConns   = 64
	adminProbeConns = 4
)

// adminLimits bound what one client of the admin port can make the node
// hold: the port sits beside the RPC port and must not be the way to starve
// it (memory, descriptors, goroutines), nor the way to starve the probes
// that keep the node alive. Tests shorten them.
type adminLimits struct {
	ReadHeaderTimeout time.Duration // slow-header (slowloris) clients
	ReadTimeout       time.Duration // the whole request
	WriteTimeout      time.Duration // a client that does not read its answer
	IdleTimeout       time.Duration // idle keep-alive connections
	MaxHeaderBytes    int
	MaxConns          int // connections held at once (more: see adminListener)
	// ProbeConns are accepted past MaxConns when no held connection is
	// idle: they are served /healthz and /readyz only, one request each.
	ProbeConns int
	// ConnRate and ConnBurst are one connection's request budget (a token
	// bucket): a request past it is answered 429 and the connection
	// closed, so one client cannot keep a slot busy for ever.
	ConnRate  float64 // requests per second
	ConnBurst int
	// MetricsInFlight is how many /metrics answers are built at once; more
	// are answered 503 at once (a scrape builds the whole exposition in
	// memory, so unbounded concurrent scrapes grow the heap without bound).
	MetricsInFlight int
	MetricsTimeout  time.Duration    // a /metrics answer slower than this is a 503
	Now             func() time.Time // nil: time.Now (tests: a fake clock)
}

func defaultAdminLimits() adminLimits {
	return adminLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10, MaxConns: adminMaxConns, ProbeConns: adminProbeConns,
		ConnRate: adminConnRate, ConnBurst: adminConnRate, MetricsInFlight: 4, MetricsTimeout: 10 * time.Second}
}

// adminConnRate is one admin connection's default request budget per
// second (and burst). A scraper asks once per scrape interval, a probe
// opens a connection per probe, a person reloads /status by hand and a
// test polls every 10 ms: all far below. A client pipelining requests on
// one connection as fast as it can (tens of thousands a second, a core's
// worth) is cut off after a second's worth.
const adminConnRate = 200

// adminLogEvery bounds each of the admin port's limit logs to one line per
// interval; the counters are exact.
const adminLogEvery = 10 * time.Second

// newAdminServer returns the admin HTTP server with lim's timeouts and the
// listener to serve it on (ln with lim's connection limits, see
// adminListener), registering the limits' metrics in reg. The server's own
// error lines (accept failures, a handler's panic) go to the node's log as
// warnings instead of plain text on stderr.
func newAdminServer(ln net.Listener, h http.Handler, lim adminLimits, reg prometheus.Registerer, lg *zap.Logger) (*http.Server, *adminListener, error) {
	errLog, _ := zap.NewStdLogAt(lg.Named("admin_http"), zap.WarnLevel)
	al := newAdminListener(ln, lim, lg)
	if err := al.register(reg); err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: al.guard(h), ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeaderBytes, ErrorLog: errLog,
		ConnState: al.connState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ac, ok := c.(*adminConn); ok {
				return context.WithValue(ctx, adminConnKey{}, ac)
			}
			return ctx
		}}
	return srv, al, nil
}

// adminListener holds at most lim.MaxConns accepted connections, and keeps
// those from starving the probes (issue 30: 64 keep-alive clients each
// sending one /healthz every 30 s held every slot, and the liveness probe
// failed until Kubernetes restarted the node). Past the cap, a new
// connection
//
//  1. takes the slot of the connection idle longest between requests
//     (net/http's StateIdle), which is closed: an HTTP client reconnects
//     for its next request, so this costs a keep-alive client nothing but
//     a handshake;
//  2. else, when every held connection is inside a request, takes one of
//     lim.ProbeConns reserve slots, which answer /healthz and /readyz only
//     (anything else 503) and close after one answer;
//  3. else waits, in Accept and then in the kernel's accept queue, as
//     before: a scraper retries later, and no connection past the caps
//     costs the node a goroutine and buffers.
//
// Each connection also has a request budget (lim.ConnRate, lim.ConnBurst):
// a client that keeps its connection busy with requests is answered 429
// and closed, so step 1 always finds an idle one soon.
type adminListener struct {
	net.Listener
	lim  adminLimits
	now  func() time.Time
	log  *zap.Logger
	logs *logevery.Limiter // keys "evict", "probe", "wait", "limit"

	mu     sync.Mutex
	held   int // connections in normal slots
	probes int // connections in probe slots
	conns  map[*adminConn]struct{}
	wake   chan struct{} // a slot freed or a connection went idle

	done      chan struct{}
	closeOnce sync.Once

	evicted, probe, limited prometheus.Counter
}

func newAdminListener(ln net.Listener, lim adminLimits, lg *zap.Logger) *adminListener {
	now := lim.Now
	if now == nil {
		now = time.Now
	}
	return &adminListener{Listener: ln, lim: lim, now: now, log: lg.Named("admin_conns"), logs: logevery.New(adminLogEvery, now),
		conns: map[*adminConn]struct{}{}, wake: make(chan struct{}, 1), done: make(chan struct{}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_admin_connections_evicted_total",
			Help: "Idle keep-alive admin connections closed to make room for a new one while all admin slots were held."}),
		probe: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_admin_connections_probe_total",
			Help: "Admin connections accepted into a probe slot (only /healthz and /readyz served) while every admin slot was busy with a request."}),
		limited: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_admin_requests_limited_total",
			Help: "Admin requests answered 429 (and their connection closed) for going over one connection's request budget."}),
	}
}

func (l *adminListener) register(reg prometheus.Registerer) error {
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idgen_admin_connections",
		Help: "Admin connections held now, in normal and probe slots."}, func() float64 { return float64(l.heldNow()) })
	for _, c := range []prometheus.Collector{l.evicted, l.probe, l.limited, held} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering admin connection metrics: %w", err)
		}
	}
	return nil
}

// heldNow is the connections held in normal and probe slots.
func (l *adminListener) heldNow() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held + l.probes
}

func (l *adminListener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *adminListener) Accept() (net.Conn, error) {
	// Wait for a normal slot, an idle connection to take the slot of, or a
	// free probe slot, before accepting: connections past all of them stay
	// in the kernel's accept queue.
	for {
		l.mu.Lock()
		room := l.held < l.lim.MaxConns || l.oldestIdle() != nil || l.probes < l.lim.ProbeConns
		l.mu.Unlock()
		if room {
			break
		}
		select {
		case <-l.wake:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if l.held < l.lim.MaxConns {
			l.held++
			ac := l.track(c, false)
			l.mu.Unlock()
			return ac, nil
		}
		if v := l.oldestIdle(); v != nil {
			delete(l.conns, v) // no one else picks it
			idle := l.now().Sub(v.idleSince)
			l.mu.Unlock()
			_ = v.Close() // frees its slot
			l.evicted.Inc()
			if ok, held := l.logs.Allow("evict"); ok {
				l.log.Info("admin port full: closed the longest-idle keep-alive connection to make room",
					zap.String("closed", v.RemoteAddr().String()), zap.Duration("idle", idle), zap.String("for", c.RemoteAddr().String()),
					zap.Int("max_connections", l.lim.MaxConns), zap.Int("evicted_since_last_line", held+1))
			}
			continue
		}
		if l.probes < l.lim.ProbeConns {
			l.probes++
			ac := l.track(c, true)
			l.mu.Unlock()
			l.probe.Inc()
			if ok, held := l.logs.Allow("probe"); ok {
				l.log.Warn("admin port full with requests in flight: serving a connection on a probe slot (/healthz and /readyz only)",
					zap.String("remote", c.RemoteAddr().String()), zap.Int("max_connections", l.lim.MaxConns),
					zap.Int("probe_slots", l.lim.ProbeConns), zap.Int("probe_conns_since_last_line", held+1),
					zap.String("fix", "many slow admin clients: find them with ss -tn sport = :ADMIN_PORT; idgen_admin_connections_probe_total counts these"))
			}
			return ac, nil
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-l.done:
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

// track registers c in a slot; l.mu is held.
func (l *adminListener) track(c net.Conn, probe bool) *adminConn {
	ac := &adminConn{Conn: c, l: l, probe: probe}
	if !probe {
		l.conns[ac] = struct{}{}
	}
	if !probe && l.lim.ConnBurst > 0 {
		ac.tokens, ac.refilled = float64(l.lim.ConnBurst), l.now()
	}
	return ac
}

// oldestIdle is the normal-slot connection idle longest, or nil; l.mu is
// held.
func (l *adminListener) oldestIdle() *adminConn {
	var v *adminConn
	for c := range l.conns {
		if !c.idleSince.IsZero() && (v == nil || c.idleSince.Before(v.idleSince)) {
			v = c
		}
	}
	return v
}

// connState follows net/http's view of each connection: only a connection
// between requests (StateIdle) may be closed to make room.
func (l *adminListener) connState(c net.Conn, st http.ConnState) {
	ac, ok := c.(*adminConn)
	if !ok {
		return
	}
	idle := st == http.StateIdle
	l.mu.Lock()
	ac.idleSince = time.Time{}
	if idle {
		ac.idleSince = l.now()
	}
	l.mu.Unlock()
	if idle {
		l.signal()
	}
}

func (l *adminListener) release(ac *adminConn) {
	l.mu.Lock()
	delete(l.conns, ac)
	if ac.probe {
		l.probes--
	} else {
		l.held--
	}
	l.mu.Unlock()
	l.signal()
}

func (l *adminListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// adminConnKey is the request-context key of the request's *adminConn.
type adminConnKey struct{}

// guard enforces, per request, the probe slots' restriction and each
// connection's request budget.
func (l *adminListener) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ac, _ := r.Context().Value(adminConnKey{}).(*adminConn)
		if ac == nil {
			h.ServeHTTP(w, r)
			return
		}
		if ac.probe {
			w.Header().Set("Connection", "close")
			if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
				w.Header().Set("Retry-After", "1")
				http.Error(w, fmt.Sprintf("admin port busy: all %d connections are inside requests; this connection may ask /healthz or /readyz only; retry later", l.lim.MaxConns), http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		if !ac.take(l.now(), l.lim) {
			l.limited.Inc()
			if ok, held := l.logs.Allow("limit"); ok {
				l.log.Warn("admin connection over its request budget: answered 429 and closed",
					zap.String("remote", ac.RemoteAddr().String()), zap.String("path", r.URL.Path),
					zap.Float64("requests_per_second", l.lim.ConnRate), zap.Int("burst", l.lim.ConnBurst),
					zap.Int("limited_since_last_line", held+1))
			}
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("too many requests on one connection (budget %g/s, burst %d): reconnect and slow down", l.lim.ConnRate, l.lim.ConnBurst), http.StatusTooManyRequests)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// adminConn is one accepted admin connection.
type adminConn struct {
	net.Conn
	l     *adminListener
	probe bool // in a probe slot: /healthz and /readyz only, one request

	// Guarded by l.mu: since when the connection is between requests
	// (net/http's StateIdle); zero while it is not.
	idleSince time.Time

	// The request budget; used by the connection's own serving goroutine
	// only (net/http serves one request per connection at a time).
	tokens   float64
	refilled time.Time

	once sync.Once
}

// take spends one request of the budget at now, or reports false.
func (c *adminConn) take(now time.Time, lim adminLimits) bool {
	if lim.ConnBurst <= 0 {
		return true
	}
	if d := now.Sub(c.refilled); d > 0 {
		c.tokens = min(float64(lim.ConnBurst), c.tokens+d.Seconds()*lim.ConnRate)
		c.refilled = now
	}
	if c.tokens < 1 {
		return false
	}
	c.tokens--
	return true
}

func (c *adminConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

// promLogger adapts zap to promhttp.Logger (errors while gathering or
// writing /metrics).
type promLogger struct{ log *zap.Logger }

func (p promLogger) Println(v ...any) {
	p.log.Warn("serving /metrics", zap.String("error", fmt.Sprint(v...)))
}

var _ promhttp.Logger = promLogger{}

// adminMux serves the admin port. It answers from the first moment of the
// process: /healthz is liveness (the process runs), /readyz readiness.
//
// /readyz is 200 while every channel the node is configured for can serve
// or (snowflake refusing at run time) fall back to segments, so a load
// balancer does not pull UNORDERED and ORDERED traffic from a node whose
// clock stepped back. /readyz?channel=snowflake (or unordered, ordered) is
// strict: 503 whenever that channel itself refuses. The body is JSON with
// each channel's state and reason, and while starting the wait remaining.
//
// /status is the same picture for a person: one HTML page with the node's
// state, channels, worker slot, the cluster's members, the businesses and
// the last refused RPCs (status.go).
//
// lim bounds /metrics (MetricsInFlight, MetricsTimeout); lg receives its
// gathering errors.
func adminMux(nd *node, m *metrics, debug func(*http.ServeMux), lim adminLimits, lg *zap.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		st := nd.status()
		ready := st.Ready
		if ch := r.URL.Query().Get("channel"); ch != "" {
			c, ok := st.Channels[ch]
			if !ok {
				http.Error(w, fmt.Sprintf("unknown channel %q: want snowflake, unordered or ordered", ch), http.StatusBadRequest)
				return
			}
			ready = c.Ready
		}
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{MaxRequestsInFlight: lim.MetricsInFlight,
		Timeout: lim.MetricsTimeout, ErrorLog: promLogger{lg.Named("metrics")}}))
	mux.Handle("/status", newStatusPage(nd, m, lg.Named("status")))
	debug(mux)
	return mux
}
