package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/idgen/idgen/clock/clocktest"
)

// blockingCollector blocks every Collect until release is closed, counting
// the Collects running at once.
type blockingCollector struct {
	desc    *prometheus.Desc
	release chan struct{}
	now     atomic.Int32
	peak    atomic.Int32
}

func (b *blockingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b *blockingCollector) Collect(ch chan<- prometheus.Metric) {
	n := b.now.Add(1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-b.release
	b.now.Add(-1)
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, 1)
}

// startAdmin serves the admin mux with lim on a loopback port.
func startAdmin(t *testing.T, lim adminLimits, extra prometheus.Collector) (string, *adminListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clk, debug := newClock()
	m := newMetrics()
	if extra != nil {
		m.reg.MustRegister(extra)
	}
	srv, sln, err := newAdminServer(ln, adminMux(newNode(clk, Config{}), m, debug, lim, zap.NewNop()), lim, m.reg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(sln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	})
	return ln.Addr().String(), sln
}

// TestAdminScrapeFlood: 100 connections asking for /metrics and never
// reading their answers hold at most MaxConns + ProbeConns connections and
// at most MetricsInFlight scrapes being built; every other one is answered
// 503 at once (and, idle after its answer, gives its slot to the next one).
func TestAdminScrapeFlood(t *testing.T) {
	lim := defaultAdminLimits()
	lim.MaxConns = 8
	lim.MetricsTimeout = time.Minute // the blocked scrapes stay blocked
	bc := &blockingCollector{desc: prometheus.NewDesc("test_blocking", "blocks", nil, nil), release: make(chan struct{})}
	addr, sln := startAdmin(t, lim, bc)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 100 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(15 * time.Second)
	for (bc.now.Load() < int32(lim.MetricsInFlight) || testutil.ToFloat64(sln.evicted)+testutil.ToFloat64(sln.probe) < float64(100-lim.MaxConns)) &&
		time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// Settle, then check nothing went past the caps.
	time.Sleep(300 * time.Millisecond)
	if got := sln.heldNow(); got > lim.MaxConns+lim.ProbeConns {
		t.Errorf("%d admin connections held, more than the cap %d + %d probe slots", got, lim.MaxConns, lim.ProbeConns)
	}
	if p := bc.peak.Load(); p != int32(lim.MetricsInFlight) {
		t.Errorf("%d scrapes built at once, want MetricsInFlight %d", p, lim.MetricsInFlight)
	}
	// Those past the in-flight limit were answered 503; the others wait
	// for the blocked scrape.
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		busy, none int
	)
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && resp.StatusCode == http.StatusServiceUnavailable:
				busy++
			case err != nil:
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					none++
				}
			}
		})
	}
	wg.Wait()
	if want := 100 - lim.MetricsInFlight; busy != want {
		t.Errorf("%d scrapes answered 503, want %d (in flight %d)", busy, want, lim.MetricsInFlight)
	}
	if want := lim.MetricsInFlight; none != want {
		t.Errorf("%d connections without an answer, want %d", none, want)
	}
	close(bc.release)
}

// TestAdminIdleKeepAliveClosed: an idle keep-alive connection is closed by
// the server after IdleTimeout.
func TestAdminIdleKeepAliveClosed(t *testing.T) {
	lim := defaultAdminLimits()
	lim.IdleTimeout = time.Second
	addr, _ := startAdmin(t, lim, nil)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("/healthz: %v %v (want 200, kept alive)", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("idle keep-alive connection still open after 15s with IdleTimeout 1s (read: %v)", err)
	}
}

// TestAdminSlowHeaderClosed: a client that never finishes its request
// header is cut off after ReadHeaderTimeout.
func TestAdminSlowHeaderClosed(t *testing.T) {
	lim := defaultAdminLimits()
	lim.ReadHeaderTimeout = 500 * time.Millisecond
	addr, _ := startAdmin(t, lim, nil)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection with an unfinished header was still open after 15s")
	}
	if strings.Contains(string(b), "200 OK") {
		t.Fatalf("an unfinished request was answered: %q", b)
	}
}

// healthz asks for /healthz on a new connection (as the kubelet does) and
// returns the status code, or an error when no answer came within 10 s.
func healthz(addr, path string) (int, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// holdKeepAlive opens n connections that each ask /healthz once and keep
// the connection open, as a keep-alive client between requests does.
func holdKeepAlive(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("keep-alive connection %d: %v %v", i, resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return conns
}

// TestAdminProbesNotStarvedByKeepAlive (issue 30): with all 64 admin
// connections held by keep-alive clients between requests, /healthz and
// /readyz on new connections are answered: the first takes the slot of the
// connection idle longest, which is closed and counted, and the next ones
// the slot the first freed when it closed (or, if they come before it is
// freed, the next longest-idle). Before, the probes
// waited in the accept queue until IdleTimeout (60 s) freed a slot, and a
// client asking every 30 s held its slot for ever.
func TestAdminProbesNotStarvedByKeepAlive(t *testing.T) {
	lim := defaultAdminLimits()
	addr, sln := startAdmin(t, lim, nil)
	conns := holdKeepAlive(t, addr, lim.MaxConns)
	for i, path := range []string{"/healthz", "/readyz", "/healthz"} {
		code, err := healthz(addr, path)
		if err != nil {
			t.Fatalf("%s with %d keep-alive connections held: %v", path, lim.MaxConns, err)
		}
		if path == "/healthz" && code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
		if got := testutil.ToFloat64(sln.evicted); got < 1 || got > float64(i+1) {
			t.Errorf("idgen_admin_connections_evicted_total = %v after %d probes, want 1 to %d", got, i+1, i+1)
		}
	}
	// Exactly the evicted connections were closed, among the first
	// (longest idle) ones.
	n := int(testutil.ToFloat64(sln.evicted))
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		closed []int
	)
	for i, c := range conns {
		wg.Go(func() {
			if closedByServer(c, time.Second) {
				mu.Lock()
				defer mu.Unlock()
				closed = append(closed, i)
			}
		})
	}
	wg.Wait()
	if len(closed) != n || slices.Max(append(closed, 0)) > 3 {
		t.Errorf("keep-alive connections closed: %v, want %d of the first ones", closed, n)
	}
}

// TestAdminProbeSlots (issue 30): with every admin connection inside a
// request (slow headers here; ReadHeaderTimeout is long so they hold), a new
// connection gets a probe slot: /healthz is answered, anything else 503,
// and the connection is closed after one answer.
func TestAdminProbeSlots(t *testing.T) {
	lim := defaultAdminLimits()
	lim.MaxConns = 8
	lim.ReadHeaderTimeout, lim.ReadTimeout = time.Minute, time.Minute
	addr, sln := startAdmin(t, lim, nil)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range lim.MaxConns {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for sln.heldNow() < lim.MaxConns && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if code, err := healthz(addr, "/healthz"); err != nil || code != 200 {
		t.Fatalf("/healthz with every admin connection inside a request: %d %v", code, err)
	}
	if code, err := healthz(addr, "/metrics"); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("/metrics on a probe slot: %d %v, want 503", code, err)
	}
	if got := testutil.ToFloat64(sln.probe); got != 2 {
		t.Errorf("idgen_admin_connections_probe_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(sln.evicted); got != 0 {
		t.Errorf("idgen_admin_connections_evicted_total = %v, want 0 (no connection was idle)", got)
	}
	// A probe slot serves one request: a second on the same connection
	// finds it closed.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("/healthz on a probe slot: %v %v (want 200 and Connection: close)", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Fatal("a second request was answered on a probe slot")
	}
}

// TestAdminConnRateLimit (issue 30): one connection gets ConnBurst requests
// at once and ConnRate a second after; the request past that is answered
// 429 and the connection closed, counted; a new connection is served.
func TestAdminConnRateLimit(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	lim := defaultAdminLimits()
	lim.ConnRate, lim.ConnBurst, lim.Now = 2, 5, clk.Now
	addr, sln := startAdmin(t, lim, nil)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	ask := func() int {
		t.Helper()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 5 {
		if code := ask(); code != 200 {
			t.Fatalf("request %d of the burst: %d", i, code)
		}
	}
	clk.Add(time.Second) // two more
	for i := range 2 {
		if code := ask(); code != 200 {
			t.Fatalf("request %d after a second: %d", i, code)
		}
	}
	if code := ask(); code != http.StatusTooManyRequests {
		t.Fatalf("request past the budget: %d, want 429", code)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after its 429")
	}
	if got := testutil.ToFloat64(sln.limited); got != 1 {
		t.Errorf("idgen_admin_requests_limited_total = %v, want 1", got)
	}
	if code, err := healthz(addr, "/healthz"); err != nil || code != 200 {
		t.Fatalf("a new connection after the 429: %d %v", code, err)
	}
}
