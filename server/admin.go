package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// adminMaxConns caps the admin port's connections held at once; more wait
// in the kernel's accept queue until one closes. It is also part of the
// descriptor reserve kept from RPC connections (transport.go).
const adminMaxConns = 64

// adminLimits bound what one client of the admin port can make the node
// hold: the port sits beside the RPC port and must not be the way to starve
// it (memory, descriptors, goroutines). Tests shorten them.
type adminLimits struct {
	ReadHeaderTimeout time.Duration // slow-header (slowloris) clients
	ReadTimeout       time.Duration // the whole request
	WriteTimeout      time.Duration // a client that does not read its answer
	IdleTimeout       time.Duration // idle keep-alive connections
	MaxHeaderBytes    int
	MaxConns          int // connections held at once (more wait to be accepted)
	// MetricsInFlight is how many /metrics answers are built at once; more
	// are answered 503 at once (a scrape builds the whole exposition in
	// memory, so unbounded concurrent scrapes grow the heap without bound).
	MetricsInFlight int
	MetricsTimeout  time.Duration // a /metrics answer slower than this is a 503
}

func defaultAdminLimits() adminLimits {
	return adminLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10, MaxConns: adminMaxConns,
		MetricsInFlight: 4, MetricsTimeout: 10 * time.Second}
}

// newAdminServer returns the admin HTTP server with lim's timeouts and the
// listener to serve it on (ln capped at lim.MaxConns). The server's own
// error lines (accept failures, a handler's panic) go to the node's log as
// warnings instead of plain text on stderr.
func newAdminServer(ln net.Listener, h http.Handler, lim adminLimits, lg *zap.Logger) (*http.Server, net.Listener) {
	errLog, _ := zap.NewStdLogAt(lg.Named("admin_http"), zap.WarnLevel)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeaderBytes, ErrorLog: errLog}
	return srv, newSemListener(ln, lim.MaxConns)
}

// semListener holds at most n accepted connections: Accept waits for a
// slot before accepting, so connections past the cap wait in the kernel's
// accept queue (a scraper retries later) instead of costing the node a
// goroutine and buffers each. Like golang.org/x/net/netutil.LimitListener,
// without adding that module as a dependency for thirty lines.
type semListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newSemListener(ln net.Listener, n int) *semListener {
	return &semListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *semListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &semConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *semListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type semConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *semConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
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
