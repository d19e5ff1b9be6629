package plugins

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/ordered/perrequest"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
	"github.com/idgen/idgen/snowflake"
)

// newIssuer builds an issuer on a memory store with reg's plugins.
func newIssuer(t *testing.T, reg *ext.Registry) *issuer.Issuer {
	t.Helper()
	store := memstore.New()
	layout := snowflake.Layout{}.Normalize()
	floor := layout.Floor(time.Now().UnixMilli() - 1000)
	u, err := segment.NewUnordered(segment.UnorderedConfig{Store: store, Floor: floor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	o, err := perrequest.New(perrequest.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	is, err := issuer.New(issuer.Config{Store: store, Unordered: u, Ordered: o, Bizs: segment.NewBizCache(store, time.Millisecond),
		Layout: layout, Guard: clock.NewGuard(clock.GuardConfig{}, 0), Floor: floor, Extensions: reg})
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// blockingWriter is a disk that does not answer until released.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestAuditSlowSinkNeverBlocksNextIDs (issue 14): with a sink whose writes
// block, NextIDs through the issuer does not wait, the records that do not
// fit are dropped and counted, and Close writes the buffered ones with
// every field.
func TestAuditSlowSinkNeverBlocksNextIDs(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	audit := NewAudit(w, AuditConfig{ServedBy: "10.0.0.1:8888", Buffer: 8})
	reg := ext.NewRegistry()
	if err := reg.RegisterPlugin(audit); err != nil {
		t.Fatal(err)
	}
	is := newIssuer(t, reg)
	ctx := context.Background()
	if _, err := is.CreateBiz(ctx, segment.Biz{Name: "orders", Channel: segment.ChannelUnordered, Plugins: []string{AuditName}}); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if _, err := is.Next(ctx, issuer.Request{Biz: "orders", Count: 3, Caller: "192.0.2.7:5555"}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("NextIDs blocked behind the audit sink")
	}
	t.Logf("%d NextIDs with a blocked audit sink took %v", n, time.Since(start))
	// Only the buffer plus the one batch the writer holds (at most 64 KiB
	// of lines) got through; the rest was dropped and counted.
	dropped := value(audit.dropped)
	if dropped < n/2 {
		t.Fatalf("dropped %v, want at least %d", dropped, n/2)
	}
	close(w.release)
	if err := audit.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	written := value(audit.written)
	if written+dropped != n || written < 1 {
		t.Fatalf("written %v + dropped %v, want %d", written, dropped, n)
	}
	sc := bufio.NewScanner(bytes.NewReader(w.buf.Bytes()))
	lines := 0
	for sc.Scan() {
		lines++
		var r AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Biz != "orders" || r.Channel != "unordered" || r.Served != "unordered" || r.Count != 3 || len(r.Ranges) == 0 ||
			r.Caller != "192.0.2.7:5555" || r.ServedBy != "10.0.0.1:8888" || r.Time.IsZero() || time.Since(r.Time) > time.Minute {
			t.Fatalf("record %s: missing or wrong fields", sc.Text())
		}
	}
	if float64(lines) != written {
		t.Fatalf("%d lines, %v written", lines, written)
	}
	// Closed: records are dropped, never block or panic.
	if _, err := is.Next(ctx, issuer.Request{Biz: "orders", Count: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestAuditCloseFlushes: records still buffered when Close is called are
// written.
func TestAuditCloseFlushes(t *testing.T) {
	var buf bytes.Buffer
	a := NewAudit(&buf, AuditConfig{Buffer: 100})
	for i := 0; i < 50; i++ {
		a.After(context.Background(), &ext.Call{Biz: segment.Biz{Name: "b"}, Channel: segment.ChannelSnowflake, Count: 1, Worker: 7},
			&ext.Result{Ranges: []segment.Range{{First: int64(i + 1), Last: int64(i + 1)}}, Channel: segment.ChannelSnowflake})
	}
	if err := a.Close(0); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(buf.String(), "\n"); got != 50 {
		t.Fatalf("%d lines after Close, want 50", got)
	}
	if !strings.Contains(buf.String(), `"worker":7`) {
		t.Fatalf("no worker field: %s", buf.String())
	}
}

// TestStatsCountsPerBiz: the stats plugin counts IDs and requests per
// business, and the IDs are the same as without it.
func TestStatsCountsPerBiz(t *testing.T) {
	st := NewStats()
	reg := ext.NewRegistry()
	if err := reg.RegisterPlugin(st); err != nil {
		t.Fatal(err)
	}
	is := newIssuer(t, reg)
	ctx := context.Background()
	for _, b := range []segment.Biz{{Name: "with", Channel: segment.ChannelUnordered, Plugins: []string{StatsName}},
		{Name: "without", Channel: segment.ChannelUnordered}} {
		if _, err := is.CreateBiz(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var with, without []segment.Range
	for i := 0; i < 4; i++ {
		r1, err := is.Next(ctx, issuer.Request{Biz: "with", Count: 5})
		if err != nil {
			t.Fatal(err)
		}
		r2, err := is.Next(ctx, issuer.Request{Biz: "without", Count: 5})
		if err != nil {
			t.Fatal(err)
		}
		with, without = append(with, r1.Ranges...), append(without, r2.Ranges...)
	}
	if len(with) != len(without) {
		t.Fatalf("ranges differ: %v vs %v", with, without)
	}
	for i := range with {
		if with[i] != without[i] {
			t.Fatalf("ranges differ: %v vs %v", with, without)
		}
	}
	if got := value(st.issued.WithLabelValues("with", "unordered")); got != 20 {
		t.Errorf("issued %v, want 20", got)
	}
	if got := value(st.requests.WithLabelValues("with", "unordered", "ok")); got != 4 {
		t.Errorf("requests %v, want 4", got)
	}
	if got := count(st.issued); got != 1 {
		t.Errorf("%d issued series, want 1 (only the business that enables stats)", got)
	}
	st.OnError(ctx, &ext.Call{Biz: segment.Biz{Name: "with"}, Channel: segment.ChannelSnowflake}, errors.New("x"))
	if got := value(st.requests.WithLabelValues("with", "snowflake", "error")); got != 1 {
		t.Errorf("error requests %v, want 1", got)
	}
}

// value sums the counters of c, read through a registry (no
// client_model import).
func value(c prometheus.Collector) float64 {
	var v float64
	for _, m := range gather(c) {
		v += m
	}
	return v
}

func count(c prometheus.Collector) int { return len(gather(c)) }

func gather(c prometheus.Collector) []float64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var out []float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out = append(out, m.GetCounter().GetValue())
		}
	}
	return out
}
