package server

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/snowflake"
)

// scrape parses the node's /metrics.
func scrape(t *testing.T, n *testnode.Node) map[string]float64 {
	t.Helper()
	code, body, err := n.Get(context.Background(), "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				key += "|" + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			default:
				out[key] = 1
			}
			out[name] += 0 // the family exists
		}
	}
	return out
}

func shift(t *testing.T, n *testnode.Node, ms int) {
	t.Helper()
	code, body, err := n.Post(context.Background(), "/debug/clock?offset_ms="+strconv.Itoa(ms))
	if err != nil || code != 200 {
		t.Fatalf("shift clock: %d %s %v", code, body, err)
	}
}

// TestE2E_ClockRollbackFaultInject drives a real node's clock through the
// faultinject build: a small step back is absorbed, a large one refuses
// snowflake (counted, unready), a fallback business gets IDs below the
// floor, and the node recovers by itself; no ID repeats across the run.
func TestE2E_ClockRollbackFaultInject(t *testing.T) {
	node := testnode.Start(t, testnode.Options{Tags: "faultinject", DataDir: t.TempDir(), Args: []string{"--auto-create-biz", "false"}})
	c := node.Client(t)
	ctx := context.Background()
	for _, b := range []*idl.CreateBizRequest{
		{Name: "strict", Channel: ch(idl.Channel_SNOWFLAKE)},
		{Name: "lenient", Channel: ch(idl.Channel_SNOWFLAKE), Fallback: new(true)},
	} {
		if _, err := c.CreateBiz(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int64]bool{}
	take := func(biz string, n int32) (*idl.NextIDsResponse, error) {
		resp, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: biz, Count: n})
		if err != nil {
			return nil, err
		}
		for _, r := range resp.Ranges {
			for id := r.First; id <= r.Last; id++ {
				if seen[id] {
					t.Fatalf("id %d issued twice", id)
				}
				seen[id] = true
			}
		}
		return resp, nil
	}
	for _, biz := range []string{"strict", "lenient"} {
		if _, err := take(biz, 100); err != nil {
			t.Fatal(err)
		}
	}

	// 2 ms back: waited out, no error.
	shift(t, node, -2)
	for range 20 {
		if _, err := take("strict", 10); err != nil {
			t.Fatalf("after a 2ms step back: %v", err)
		}
	}

	// 2 s back (from the 2 ms already applied): refused. The step is large
	// so that a busy machine cannot let the clock catch up before the
	// checks below; retry_after_ms is how far behind the clock still is,
	// which shrinks as real time passes: bound it, never match it.
	shift(t, node, -2002)
	_, err := take("strict", 1)
	var ie *idl.IdgenError
	if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_CLOCK_ROLLBACK || !ie.Retryable || ie.RetryAfterMs < 1 || ie.RetryAfterMs > 2000 {
		t.Fatalf("strict after a 2s step back: %v, want retryable CLOCK_ROLLBACK with 0 < retry_after_ms <= 2000", err)
	}
	resp, err := take("lenient", 50)
	if err != nil {
		t.Fatalf("fallback business: %v", err)
	}
	floor := snowflake.Layout{}.Normalize().Floor(time.Now().Add(-time.Hour).UnixMilli())
	if !resp.Fallback || resp.Channel != idl.Channel_UNORDERED || resp.Ranges[len(resp.Ranges)-1].Last >= floor {
		t.Fatalf("fallback response %+v: want fallback=true from a segment below the floor %d", resp, floor)
	}
	// Readiness by channel: the node stays ready (UNORDERED and ORDERED
	// serve, SNOWFLAKE falls back), the strict snowflake probe does not.
	code, body, _ := node.Get(ctx, "/readyz")
	if code != 200 || !strings.Contains(body, "clock_rollback") {
		t.Fatalf("/readyz during rollback = %d %s; want 200 naming clock_rollback", code, body)
	}
	code, body, _ = node.Get(ctx, "/readyz?channel=snowflake")
	if code != 503 || !strings.Contains(body, "clock_rollback") {
		t.Fatalf("/readyz?channel=snowflake during rollback = %d %s; want 503", code, body)
	}
	if code, body, _ := node.Get(ctx, "/readyz?channel=unordered"); code != 200 {
		t.Fatalf("/readyz?channel=unordered during rollback = %d %s; want 200", code, body)
	}
	m := scrape(t, node)
	if m["idgen_clock_rollback_rejections_total"] < 1 || m["idgen_snowflake_fallbacks_total"] < 1 {
		t.Fatalf("rejections %v, fallbacks %v", m["idgen_clock_rollback_rejections_total"], m["idgen_snowflake_fallbacks_total"])
	}
	if m["idgen_node_state|state=clock_rollback"] != 1 {
		t.Fatalf("idgen_node_state{clock_rollback} = %v", m["idgen_node_state|state=clock_rollback"])
	}

	// The clock catches up (offset back to 0): ready again, snowflake again.
	shift(t, node, 0)
	testnode.WaitFor(t, 10*time.Second, "ready after catching up", func() bool {
		code, _, _ := node.Get(ctx, "/readyz?channel=snowflake")
		return code == 200
	})
	resp, err = take("strict", 100)
	if err != nil || resp.Channel != idl.Channel_SNOWFLAKE {
		t.Fatalf("after catching up: %+v %v", resp, err)
	}
	// The child's stderr reaches the test through a pipe: wait for the line.
	testnode.WaitFor(t, 5*time.Second, "the end-of-episode log line", func() bool {
		return strings.Contains(node.Logs(), "clock rollback episode over")
	})
	if n := strings.Count(node.Logs(), "clock rollback: refusing"); n != 1 {
		t.Fatalf("%d rollback start logs, want one per episode", n)
	}
	t.Logf("%d unique ids across the episode", len(seen))
}

// TestE2E_MetricsNamesUsedByAlerts: every metric an alert rule uses is
// exported by a node (cluster-only metrics are listed and skipped here).
func TestE2E_MetricsNamesUsedByAlerts(t *testing.T) {
	rules, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	c := node.Client(t)
	if _, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "m", Channel: ch(idl.Channel_UNORDERED), Count: 5}); err != nil {
		t.Fatal(err)
	}
	clusterOnly := map[string]bool{"idgen_clock_offset_seconds": true, "idgen_zookeeper_connected": true,
		"idgen_zookeeper_state_losses_total": true, "idgen_worker_unreadable_marks_total": true,
		"idgen_ordered_failover_barriers_total": true, // with --zk and --mysql only
		"idgen_zookeeper_acl_open":              true, // with --zk
		// The shared ZooKeeper session and its incarnation check (--zk).
		"idgen_zookeeper_restores_total":              true,
		"idgen_zookeeper_session_refused":             true,
		"idgen_zookeeper_single_server_unwitnessed":   true,
		"idgen_ordered_barrier_members_expired_total": true, // the barrier: --zk and --mysql
		"idgen_segment_ledger_claims_total":           true, // the ledger: --zk and --mysql
		"idgen_segment_ledger_unverified_pending":     true,
		"idgen_ordered_lease_store_carried_total":     true} // the ZooKeeper coordinator on MySQL
	// A refused token: idgen_auth_failures_total has a series from then on.
	if _, err := node.BareClient(t).ListBiz(context.Background(), &idl.ListBizRequest{}); err == nil {
		t.Fatal("ListBiz without a token was answered")
	}
	m := scrape(t, node)
	names := regexp.MustCompile(`idgen_[a-z_]+`).FindAllString(string(rules), -1)
	if len(names) < 5 {
		t.Fatalf("found only %v in alerts.yml", names)
	}
	for _, name := range names {
		if _, ok := m[name]; !ok && !clusterOnly[name] {
			t.Errorf("alerts.yml uses %s, not exported by the node", name)
		}
	}
}
