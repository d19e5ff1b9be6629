package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
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
func startAdmin(t *testing.T, lim adminLimits, extra prometheus.Collector) (string, *semListener) {
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
	srv, sln := newAdminServer(ln, adminMux(newNode(clk, Config{}), m, debug, lim, zap.NewNop()), lim, zap.NewNop())
	go func() { _ = srv.Serve(sln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	})
	return ln.Addr().String(), sln.(*semListener)
}

// TestAdminScrapeFlood: 100 connections asking for /metrics and never
// reading their answers hold at most MaxConns connections (the rest wait to
// be accepted) and at most MetricsInFlight scrapes being built; the
// accepted ones past that are answered 503 at once.
func TestAdminScrapeFlood(t *testing.T) {
	lim := defaultAdminLimits()
	lim.MaxConns = 8
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
	for (bc.now.Load() < int32(lim.MetricsInFlight) || len(sln.sem) < lim.MaxConns) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// Settle, then check nothing went past the caps.
	time.Sleep(300 * time.Millisecond)
	if got := len(sln.sem); got != lim.MaxConns {
		t.Errorf("%d admin connections accepted, want the cap %d", got, lim.MaxConns)
	}
	if p := bc.peak.Load(); p != int32(lim.MetricsInFlight) {
		t.Errorf("%d scrapes built at once, want MetricsInFlight %d", p, lim.MetricsInFlight)
	}
	// Of the accepted connections, those past the in-flight limit were
	// answered 503; the others wait for the blocked scrape; the rest were
	// never accepted, so nothing answers them.
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
	if want := lim.MaxConns - lim.MetricsInFlight; busy != want {
		t.Errorf("%d scrapes answered 503, want %d (accepted %d, in flight %d)", busy, want, lim.MaxConns, lim.MetricsInFlight)
	}
	if want := 100 - lim.MaxConns + lim.MetricsInFlight; none != want {
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
