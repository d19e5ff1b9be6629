package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestOpenZooKeeperWarned: a node with ZooKeeper and no zk_auth says so at
// start (naming the fix) and sets idgen_zookeeper_acl_open; with zk_auth
// it stays quiet at 0.
func TestOpenZooKeeperWarned(t *testing.T) {
	for _, tc := range []struct {
		auth string
		want float64
	}{{"", 1}, {"user:pw", 0}} {
		core, logs := observer.New(zap.WarnLevel)
		m := newMetrics()
		warnOpenZooKeeper(Config{ZK: "127.0.0.1:1", ZKAuth: tc.auth}, m, zap.New(core))
		got, err := testutil.GatherAndCount(m.reg, "idgen_zookeeper_acl_open")
		if err != nil || got != 1 {
			t.Fatalf("zk_auth %q: %d series, %v", tc.auth, got, err)
		}
		mfs, _ := m.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "idgen_zookeeper_acl_open" && mf.Metric[0].GetGauge().GetValue() != tc.want {
				t.Errorf("zk_auth %q: gauge %v, want %v", tc.auth, mf.Metric[0].GetGauge().GetValue(), tc.want)
			}
		}
		warned := logs.FilterMessageSnippet("without zk_auth").Len()
		if (tc.want == 1) != (warned == 1) {
			t.Errorf("zk_auth %q: %d warnings", tc.auth, warned)
		}
		if tc.want == 1 && logs.All()[0].ContextMap()["fix"] == nil {
			t.Error("the warning names no fix")
		}
	}
}

// gaugeOf returns the registered gauge metric name of m as a collector.
func gaugeOf(t *testing.T, m *metrics, name string) prometheus.Collector {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "copy"})
			g.Set(mf.Metric[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}
