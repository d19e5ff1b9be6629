package server

import (
	"testing"

	"github.com/idgen/idgen/segment/mysqlstore"
)

// gauges returns the values of the gauge family name in m's registry, by
// the value of label (the empty key for an unlabelled gauge).
func gauges(t *testing.T, m *metrics, name, label string) map[string]float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			key := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			out[key] = s.GetGauge().GetValue()
		}
	}
	return out
}

// TestMetricsReplication: the verdict gauge has 1 for the current verdict
// only, also after the verdict changes; the lossy gauge follows Lossy().
func TestMetricsReplication(t *testing.T) {
	m := newMetrics()
	if g := gauges(t, m, "idgen_mysql_replication_verdict", "verdict"); len(g) != 0 {
		t.Fatalf("verdict series before any MySQL check: %v", g)
	}
	if g := gauges(t, m, "idgen_mysql_replication_lossy", ""); g[""] != 0 || len(g) != 1 {
		t.Fatalf("idgen_mysql_replication_lossy before any check: %v", g)
	}
	for _, c := range []struct {
		r     mysqlstore.Replication
		lossy float64
		want  mysqlstore.Verdict
	}{
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictAsync}, 1, mysqlstore.VerdictAsync},
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictSemisyncLossless}, 0, mysqlstore.VerdictSemisyncLossless},
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictReplica}, 1, mysqlstore.VerdictReplica},
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictSemisyncDegraded}, 1, mysqlstore.VerdictSemisyncDegraded},
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictUnknown}, 0, mysqlstore.VerdictUnknown},
		{mysqlstore.Replication{}, 0, mysqlstore.VerdictUnknown},
	} {
		m.setReplication(c.r)
		if got := gauges(t, m, "idgen_mysql_replication_lossy", "")[""]; got != c.lossy {
			t.Errorf("%q: idgen_mysql_replication_lossy %v, want %v", c.r.Verdict, got, c.lossy)
		}
		g := gauges(t, m, "idgen_mysql_replication_verdict", "verdict")
		if len(g) != len(mysqlstore.Verdicts()) {
			t.Errorf("%q: verdict series %v, want one per verdict", c.r.Verdict, g)
		}
		for _, v := range mysqlstore.Verdicts() {
			want := 0.0
			if v == c.want {
				want = 1
			}
			if got, ok := g[string(v)]; !ok || got != want {
				t.Errorf("after %q: idgen_mysql_replication_verdict{verdict=%q} = %v (present %v), want %v", c.r.Verdict, v, got, ok, want)
			}
		}
	}
}
