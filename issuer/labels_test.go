package issuer

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/internal/bizlabel"
	"github.com/idgen/idgen/plugins"
	"github.com/idgen/idgen/segment"
)

// TestBizLabelCap: with MetricsMaxBizs 2, the rate-limit refusals of a
// third business land in the "_other" series, and the stats plugin given
// BizLabel shares the same cap (the first two businesses seen by either).
func TestBizLabelCap(t *testing.T) {
	reg := ext.NewRegistry()
	f := newIssuer(t, func(c *Config) { c.MetricsMaxBizs = 2; c.Extensions = reg })
	stats := plugins.NewStats(plugins.StatsLabels(f.is.BizLabel))
	if err := reg.RegisterPlugin(stats); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"one", "two", "three"} {
		if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: name, Channel: segment.ChannelUnordered, RateLimit: 1, Plugins: []string{plugins.StatsName}}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			_, err := f.is.Next(ctx, Request{Biz: name, Count: 1})
			if (i == 1) != errors.Is(err, ErrRateLimited) {
				t.Fatalf("%s request %d: %v", name, i, err)
			}
		}
	}
	for _, tc := range []struct {
		label string
		want  float64
	}{{"one", 1}, {"two", 1}, {"three", 0}, {bizlabel.Other, 1}} {
		if got := counterValue(f.is.rateLimited.WithLabelValues(tc.label, LimitRequests)); got != tc.want {
			t.Errorf("idgen_rate_limited_total{biz=%q} = %v, want %v", tc.label, got, tc.want)
		}
	}
	pr := prometheus.NewRegistry()
	pr.MustRegister(stats.Collectors()...)
	mfs, err := pr.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "biz" {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	if len(seen) != 3 || !seen["one"] || !seen["two"] || !seen[bizlabel.Other] {
		t.Errorf("stats plugin biz labels %v, want one, two and %s", seen, bizlabel.Other)
	}
	if f.is.BizLabel("three") != bizlabel.Other || f.is.BizLabel("one") != "one" {
		t.Error("BizLabel disagrees with the series")
	}
	if _, err := New(Config{Store: f.store, Unordered: f.is.cfg.Unordered, Ordered: f.is.cfg.Ordered, Bizs: f.is.cfg.Bizs, MetricsMaxBizs: -1}); err == nil {
		t.Error("a negative MetricsMaxBizs was accepted")
	}
}
