package plugins

import (
	"context"
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/segment"
)

// StatsName is the name businesses list to enable the stats plugin.
const StatsName = "stats"

// Stats is the stats plugin: per-business issuance counters. Series exist
// only for businesses that enable it, and with StatsLabels their biz label
// goes through the node's cap (issuer.BizLabel), so a cluster with many
// businesses enabling it cannot grow the series without limit.
type Stats struct {
	issued   *prometheus.CounterVec // biz, channel
	requests *prometheus.CounterVec // biz, channel, result
	label    func(biz string) string
}

var _ ext.Plugin = (*Stats)(nil)

// StatsOption configures NewStats.
type StatsOption func(*Stats)

// StatsLabels makes the plugin label a business with labels(name) instead
// of its name: pass the issuer's BizLabel so these series share the node's
// cap on per-business label values. nil keeps the names.
func StatsLabels(labels func(biz string) string) StatsOption {
	return func(s *Stats) {
		if labels != nil {
			s.label = labels
		}
	}
}

// NewStats returns the stats plugin; register Collectors with the node's
// registry.
func NewStats(opts ...StatsOption) *Stats {
	s := &Stats{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_biz_ids_issued_total",
			Help: "IDs issued to a business that enables the stats plugin, by the channel that served."}, []string{"biz", "channel"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_biz_requests_total",
			Help: "NextIDs requests of a business that enables the stats plugin, by channel (served, or asked for on failure) and result (ok, rejected, error)."},
			[]string{"biz", "channel", "result"}),
		label: func(biz string) string { return biz },
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Collectors returns the metrics.
func (s *Stats) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.issued, s.requests}
}

// Name implements ext.Plugin.
func (s *Stats) Name() string { return StatsName }

// Order implements ext.Plugin.
func (s *Stats) Order() int { return 900 }

// Before implements ext.Plugin (stats never refuses).
func (s *Stats) Before(context.Context, *ext.Call) error { return nil }

// After counts an issued request.
func (s *Stats) After(_ context.Context, c *ext.Call, res *ext.Result) {
	ch := channelLabel(res.Channel)
	var n int64
	for _, rg := range res.Ranges {
		n += rg.Len()
	}
	biz := s.label(c.Biz.Name)
	s.issued.WithLabelValues(biz, ch).Add(float64(n))
	s.requests.WithLabelValues(biz, ch, "ok").Inc()
}

// OnError counts a failed request.
func (s *Stats) OnError(_ context.Context, c *ext.Call, err error) {
	result := "error"
	if errors.Is(err, ext.ErrRejected) {
		result = "rejected"
	}
	s.requests.WithLabelValues(s.label(c.Biz.Name), channelLabel(c.Channel), result).Inc()
}

// channelLabel names built-in channels, and custom ones by number.
func channelLabel(ch segment.Channel) string {
	if s := ch.String(); s != "unknown" {
		return s
	}
	return strconv.Itoa(int(ch))
}
