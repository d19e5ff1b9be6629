package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// benchResult is the outcome of one run; its JSON form is what --json
// prints and what scripts/bench.sh records.
type benchResult struct {
	Addr        string  `json:"addr"`
	Biz         string  `json:"biz"`
	Channel     string  `json:"channel"`
	Count       int     `json:"count"`
	Concurrency int     `json:"concurrency"`
	DurationS   float64 `json:"duration_s,omitempty"` // the bound asked for
	Requests    int64   `json:"requests,omitempty"`   // the bound asked for
	WarmupS     float64 `json:"warmup_s,omitempty"`
	Keys        int     `json:"keys,omitempty"`

	ElapsedS    float64           `json:"elapsed_s"`
	OK          int64             `json:"ok"`     // successful requests
	Failed      int64             `json:"failed"` // failed requests (errors below)
	IDs         int64             `json:"ids"`
	RPS         float64           `json:"requests_per_s"` // successful requests per second
	IDsPerS     float64           `json:"ids_per_s"`
	Fallbacks   int64             `json:"fallbacks"` // answers served by the SNOWFLAKE fallback segment
	Latency     latency           `json:"latency_us"`
	Errors      map[string]int64  `json:"errors"`
	ErrorSample map[string]string `json:"error_samples,omitempty"`
	Check       *checkResult      `json:"check,omitempty"`
	Routing     *routingResult    `json:"routing,omitempty"` // requests with a sub key (ORDERED)
	Interrupted bool              `json:"interrupted,omitempty"`
}

// latency summarises successful requests, in microseconds.
type latency struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

// routingResult counts, over the measured phase, where the client sent
// the first attempt of each request with a sub key (client.Stats): to the
// shard's owner, or elsewhere (no owner map yet, owner unknown or backed
// off), where the node forwards it to the owner, one more hop.
type routingResult struct {
	ToOwner        uint64 `json:"to_owner"`
	Elsewhere      uint64 `json:"elsewhere"`
	OwnerFallbacks uint64 `json:"owner_fallbacks"` // of ToOwner: the owner failed, the call went on elsewhere
}

// checkResult is what --check found.
type checkResult struct {
	dupResult
	OrderViolations *int64 `json:"order_violations,omitempty"` // ORDERED only
}

func micros(d time.Duration) float64 { return math.Round(float64(d)/1e1) / 1e2 }

// result merges the workers' tallies.
func (r *benchRun) result(elapsed time.Duration, interrupted bool) *benchResult {
	cfg := r.cfg
	res := &benchResult{Addr: cfg.addr, Biz: cfg.biz, Channel: channelName(cfg.channel), Count: cfg.count,
		Concurrency: cfg.concurrency, DurationS: cfg.duration.Seconds(), Requests: cfg.requests,
		WarmupS: cfg.warmup.Seconds(), Keys: len(cfg.keys), ElapsedS: math.Round(elapsed.Seconds()*1000) / 1000,
		Errors: map[string]int64{}, ErrorSample: map[string]string{}, Interrupted: interrupted}
	h := newHistogram()
	var sinks [][]*idSink // per worker, per key
	var violations int64
	for _, w := range r.workers {
		res.OK += w.ok
		res.Failed += w.failed
		res.IDs += w.ids
		res.Fallbacks += w.fallbacks
		h.merge(w.hist)
		for code, n := range w.errs {
			res.Errors[code] += n
			if _, ok := res.ErrorSample[code]; !ok {
				res.ErrorSample[code] = w.samples[code]
			}
		}
		sinks = append(sinks, w.sinks)
		if w.order != nil {
			violations += w.order.violations
		}
	}
	if s := elapsed.Seconds(); s > 0 {
		res.RPS = math.Round(float64(res.OK)/s*10) / 10
		res.IDsPerS = math.Round(float64(res.IDs)/s*10) / 10
	}
	res.Latency = latency{Min: micros(h.minimum()), Mean: micros(h.mean()), P50: micros(h.quantile(0.50)),
		P95: micros(h.quantile(0.95)), P99: micros(h.quantile(0.99)), P999: micros(h.quantile(0.999)),
		Max: micros(h.maximum())}
	if cfg.check {
		res.Check = &checkResult{dupResult: findDuplicatesPerKey(sinks, 10)}
		if strictOrder(cfg.channel) {
			res.Check.OrderViolations = &violations
		}
	}
	return res
}

// verdict is the command's error: a failed check, a run where nothing
// succeeded, or an interruption.
func (res *benchResult) verdict() error {
	if c := res.Check; c != nil {
		if c.Duplicates > 0 {
			return fmt.Errorf("check failed: %d duplicate IDs among %d (e.g. %v)", c.Duplicates, c.Checked, c.Examples)
		}
		if c.OrderViolations != nil && *c.OrderViolations > 0 {
			return fmt.Errorf("check failed: %d ORDERED answers not strictly above the caller's previous ID for the key", *c.OrderViolations)
		}
	}
	if res.OK == 0 && res.Failed > 0 {
		return errors.New("no request succeeded: " + res.errorLine())
	}
	if res.Interrupted {
		return errors.New("interrupted: the figures above cover only part of the run")
	}
	return nil
}

func (res *benchResult) errorLine() string {
	if len(res.Errors) == 0 {
		return "none"
	}
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(res.Errors)) {
		parts = append(parts, fmt.Sprintf("%s %d (%s)", code, res.Errors[code], res.ErrorSample[code]))
	}
	return strings.Join(parts, "; ")
}

// writeBenchResult prints the report, as text or as one JSON object.
func writeBenchResult(w io.Writer, cfg benchConfig, res *benchResult) error {
	if cfg.asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var sb strings.Builder
	bound := fmt.Sprintf("duration %v", cfg.duration)
	if cfg.requests > 0 {
		bound = fmt.Sprintf("%d requests", cfg.requests)
	}
	fmt.Fprintf(&sb, "target      %s biz=%s channel=%s count=%d concurrency=%d %s", res.Addr, res.Biz, res.Channel,
		res.Count, res.Concurrency, bound)
	if res.Keys > 0 {
		fmt.Fprintf(&sb, " keys=%d", res.Keys)
	}
	fmt.Fprintf(&sb, "\nrequests    %d ok, %d failed in %.2fs\n", res.OK, res.Failed, res.ElapsedS)
	fmt.Fprintf(&sb, "throughput  %.1f requests/s, %.1f IDs/s\n", res.RPS, res.IDsPerS)
	l := res.Latency
	fmt.Fprintf(&sb, "latency     p50 %s  p95 %s  p99 %s  p99.9 %s  max %s  (mean %s)\n", fmtMicros(l.P50),
		fmtMicros(l.P95), fmtMicros(l.P99), fmtMicros(l.P999), fmtMicros(l.Max), fmtMicros(l.Mean))
	fmt.Fprintf(&sb, "errors      %s\n", res.errorLine())
	if res.Fallbacks > 0 {
		fmt.Fprintf(&sb, "fallback    %d answers came from the SNOWFLAKE fallback segment\n", res.Fallbacks)
	}
	if r := res.Routing; r != nil {
		fmt.Fprintf(&sb, "routing     %d to the owner first (%d of them fell back elsewhere), %d elsewhere (forwarded by the node)\n",
			r.ToOwner, r.OwnerFallbacks, r.Elsewhere)
	}
	if c := res.Check; c != nil {
		fmt.Fprintf(&sb, "check       %d IDs, %d duplicates", c.Checked, c.Duplicates)
		if len(c.Examples) > 0 {
			fmt.Fprintf(&sb, " (e.g. %v)", c.Examples)
		}
		if c.OrderViolations != nil {
			fmt.Fprintf(&sb, ", %d order violations", *c.OrderViolations)
		}
		sb.WriteString("\n")
	}
	if res.Interrupted {
		sb.WriteString("note        interrupted before the end of the run\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func fmtMicros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.0fµs", us)
}
