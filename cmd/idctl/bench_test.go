package main

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/client"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

func TestBucketBounds(t *testing.T) {
	vals := []int64{0, 1, 2, histSub - 1, histSub, 2*histSub - 1, 2 * histSub, 2*histSub + 1, 1000, 1023, 1024, 1025,
		1 << 20, 1<<20 - 1, 123456789, 1 << 40, math.MaxInt64 - 1, math.MaxInt64}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		vals = append(vals, r.Int64N(1<<uint(r.IntN(62)+1)))
	}
	for _, v := range vals {
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d, out of 0..%d", v, i, histBuckets-1)
		}
		lo, hi := bucketBounds(i)
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket %d with bounds %d..%d", v, i, lo, hi)
		}
		if width := hi - lo + 1; width > 1 && float64(width) > float64(v)/histSub+1 {
			t.Fatalf("value %d: bucket width %d above 1/%d of the value", v, width, histSub)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d bounds %d..%d map to %d and %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
	}
	// Buckets tile the value space in order.
	for i := 1; i < histBuckets; i++ {
		_, prevHi := bucketBounds(i - 1)
		lo, _ := bucketBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ends at %d", i, lo, prevHi)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		h := newHistogram()
		if h.quantile(0.5) != 0 || h.maximum() != 0 || h.minimum() != 0 || h.mean() != 0 {
			t.Fatal("empty histogram should report zeros")
		}
	})
	t.Run("exact small values", func(t *testing.T) {
		h := newHistogram()
		for v := 100; v >= 1; v-- { // order must not matter
			h.record(time.Duration(v))
		}
		for _, c := range []struct {
			q    float64
			want time.Duration
		}{{0.01, 1}, {0.5, 50}, {0.95, 95}, {0.99, 99}, {0.999, 100}, {1, 100}} {
			if got := h.quantile(c.q); got != c.want {
				t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
			}
		}
		if h.minimum() != 1 || h.maximum() != 100 || h.mean() != 50 { // mean 50.5 truncated
			t.Errorf("min/max/mean = %v/%v/%v", h.minimum(), h.maximum(), h.mean())
		}
	})
	t.Run("uniform microseconds within bucket error", func(t *testing.T) {
		h := newHistogram()
		const n = 100000
		for i := 1; i <= n; i++ {
			h.record(time.Duration(i) * time.Microsecond)
		}
		for _, q := range []float64{0.5, 0.95, 0.99, 0.999} {
			want := float64(q*n) * float64(time.Microsecond)
			got := float64(h.quantile(q))
			if got < want || got > want*(1+1.0/histSub) {
				t.Errorf("quantile(%v) = %v, want within [%v, +%.1f%%]", q, time.Duration(got), time.Duration(want), 100.0/histSub)
			}
		}
		if h.maximum() != n*time.Microsecond || h.quantile(1) != n*time.Microsecond {
			t.Errorf("max = %v, quantile(1) = %v; want exactly %v", h.maximum(), h.quantile(1), n*time.Microsecond)
		}
	})
	t.Run("one slow outlier shows at the top only", func(t *testing.T) {
		h := newHistogram()
		for range 9999 {
			h.record(200 * time.Microsecond)
		}
		h.record(3 * time.Second)
		if got := h.quantile(0.999); got > 202*time.Microsecond {
			t.Errorf("p99.9 = %v, want about 200µs", got)
		}
		if got := h.quantile(0.99995); got < 2900*time.Millisecond {
			t.Errorf("quantile(0.99995) = %v, want about 3s", got)
		}
		if h.maximum() != 3*time.Second {
			t.Errorf("max = %v", h.maximum())
		}
	})
	t.Run("merge equals one histogram", func(t *testing.T) {
		all, a, b := newHistogram(), newHistogram(), newHistogram()
		r := rand.New(rand.NewPCG(3, 4))
		for i := range 50000 {
			d := time.Duration(r.ExpFloat64() * float64(time.Millisecond))
			all.record(d)
			if i%3 == 0 {
				a.record(d)
			} else {
				b.record(d)
			}
		}
		a.merge(b)
		a.merge(newHistogram())
		for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
			if a.quantile(q) != all.quantile(q) {
				t.Errorf("quantile(%v): merged %v, single %v", q, a.quantile(q), all.quantile(q))
			}
		}
		if a.count() != all.count() || a.maximum() != all.maximum() || a.minimum() != all.minimum() {
			t.Error("merged count/min/max differ")
		}
	})
}

func sinkOf(ranges ...idRange) *idSink {
	s := &idSink{}
	for _, r := range ranges {
		s.add(r.first, r.last)
	}
	return s
}

func one(v int64) idRange { return idRange{v, v} }

func TestFindDuplicates(t *testing.T) {
	for _, c := range []struct {
		name     string
		sinks    []*idSink
		checked  int64
		dups     int64
		examples []int64
	}{
		{"none", nil, 0, 0, nil},
		{"unique singles across callers", []*idSink{sinkOf(one(5), one(1), one(9)), sinkOf(one(2), one(8)), nil}, 5, 0, nil},
		{"planted duplicate in another caller", []*idSink{sinkOf(one(5), one(1), one(9)), sinkOf(one(2), one(9))}, 5, 1, []int64{9}},
		{"duplicate within one caller", []*idSink{sinkOf(one(7), one(3), one(7))}, 3, 1, []int64{7}},
		{"adjacent ranges are not duplicates", []*idSink{sinkOf(idRange{1, 10}), sinkOf(idRange{11, 20}, one(21))}, 21, 0, nil},
		{"overlapping ranges", []*idSink{sinkOf(idRange{1, 10}), sinkOf(idRange{8, 12})}, 15, 3, []int64{8, 9, 10}},
		{"single inside a range", []*idSink{sinkOf(idRange{100, 200}), sinkOf(one(150))}, 102, 1, []int64{150}},
		{"range swallowing a later one", []*idSink{sinkOf(idRange{1, 100}), sinkOf(idRange{10, 20}, idRange{50, 60})}, 122, 22, nil},
		{"three times counts twice", []*idSink{sinkOf(one(4)), sinkOf(one(4)), sinkOf(one(4))}, 3, 2, []int64{4}},
		{"coalesced singles still caught", []*idSink{sinkOf(one(1), one(2), one(3)), sinkOf(one(2))}, 4, 1, []int64{2}},
		{"int64 edges", []*idSink{sinkOf(one(math.MaxInt64), one(math.MinInt64)), sinkOf(one(math.MaxInt64), one(0))}, 4, 1, []int64{math.MaxInt64}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := findDuplicates(c.sinks, 10)
			if got.Checked != c.checked || got.Duplicates != c.dups {
				t.Fatalf("checked %d, duplicates %d; want %d, %d", got.Checked, got.Duplicates, c.checked, c.dups)
			}
			if c.examples != nil && !equalInts(got.Examples, c.examples) {
				t.Fatalf("examples %v, want %v", got.Examples, c.examples)
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFindDuplicatesManyCallers mixes a million interleaved IDs from 16
// callers (as snowflake hands them out) with batches, then plants one
// duplicate.
func TestFindDuplicatesManyCallers(t *testing.T) {
	build := func() []*idSink {
		sinks := make([]*idSink, 16)
		for i := range sinks {
			sinks[i] = &idSink{}
		}
		id := int64(1 << 40)
		r := rand.New(rand.NewPCG(5, 6))
		for range 1_000_000 {
			w := r.IntN(len(sinks))
			if r.IntN(100) == 0 {
				sinks[w].add(id, id+99)
				id += 100
				continue
			}
			sinks[w].add(id, id)
			id += 1 + int64(r.IntN(3))
		}
		return sinks
	}
	sinks := build()
	if got := findDuplicates(sinks, 10); got.Duplicates != 0 {
		t.Fatalf("clean run: %d duplicates (e.g. %v)", got.Duplicates, got.Examples)
	}
	sinks = build()
	planted := sinks[3].singles[len(sinks[3].singles)/2]
	sinks[11].add(planted, planted)
	got := findDuplicates(sinks, 10)
	if got.Duplicates != 1 || len(got.Examples) != 1 || got.Examples[0] != planted {
		t.Fatalf("planted %d: got %d duplicates, examples %v", planted, got.Duplicates, got.Examples)
	}
}

func TestIDSinkCompact(t *testing.T) {
	s := &idSink{}
	for id := int64(1); id <= 1000; id++ {
		s.add(id, id)
	}
	s.add(1001, 5000)
	s.add(7000, 7000)
	if len(s.ranges) != 1 || len(s.singles) != 1 || s.count() != 5001 {
		t.Fatalf("ranges %d singles %d count %d; want 1, 1, 5001", len(s.ranges), len(s.singles), s.count())
	}
}

func TestOrderCheck(t *testing.T) {
	o := newOrderCheck(2)
	o.observe(0, []idRange{{1, 5}})
	o.observe(1, []idRange{{1, 1}}) // another key starts on its own
	o.observe(0, []idRange{{6, 6}, {9, 10}})
	if o.violations != 0 {
		t.Fatalf("increasing answers: %d violations", o.violations)
	}
	o.observe(0, []idRange{{10, 11}}) // repeats 10
	o.observe(1, []idRange{{3, 4}, {2, 2}})
	o.observe(1, []idRange{{9, 8}}) // malformed
	if o.violations != 3 {
		t.Fatalf("violations %d, want 3", o.violations)
	}
}

func TestParseBenchFlags(t *testing.T) {
	base := []string{"--addr", "127.0.0.1:1", "--biz", "b"}
	for _, c := range []struct {
		name    string
		args    []string
		wantErr string // "" means valid
		check   func(t *testing.T, c benchConfig)
	}{
		{"defaults are bounded by 10s", nil, "", func(t *testing.T, c benchConfig) {
			if c.duration != 10*time.Second || c.requests != 0 || c.concurrency != 16 || c.count != 1 || c.channel != nil || c.keys != nil {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{"zero duration is unbounded", []string{"--duration", "0"}, "unbounded", nil},
		{"negative duration is unbounded", []string{"--duration", "-1s"}, "unbounded", nil},
		{"zero requests is unbounded", []string{"--requests", "0"}, "unbounded", nil},
		{"negative requests", []string{"--requests", "-5"}, "positive", nil},
		{"duration and requests exclusive", []string{"--duration", "1s", "--requests", "10"}, "exclusive", nil},
		{"requests bound replaces duration", []string{"--requests", "10"}, "", func(t *testing.T, c benchConfig) {
			if c.requests != 10 || c.duration != 0 {
				t.Errorf("requests %d duration %v", c.requests, c.duration)
			}
		}},
		{"missing biz", []string{"--biz", ""}, "--biz", nil},
		{"zero concurrency", []string{"--concurrency", "0"}, "--concurrency", nil},
		{"zero count", []string{"--count", "0"}, "--count", nil},
		{"bad channel", []string{"--channel", "fast"}, "--channel", nil},
		{"negative warmup", []string{"--warmup", "-1s"}, "--warmup", nil},
		{"sub key on snowflake", []string{"--channel", "snowflake", "--sub-key", "k"}, "ordered channel only", nil},
		{"keys on unordered", []string{"--channel", "unordered", "--keys", "4"}, "ordered channel only", nil},
		{"stray argument", []string{"extra"}, "unexpected argument", nil},
		{"ordered gets a default key", []string{"--channel", "ordered"}, "", func(t *testing.T, c benchConfig) {
			if len(c.keys) != 1 || c.keys[0] != "bench" {
				t.Errorf("keys %v", c.keys)
			}
		}},
		{"ordered with keys", []string{"--channel", "ordered", "--sub-key", "u", "--keys", "3"}, "", func(t *testing.T, c benchConfig) {
			if strings.Join(c.keys, ",") != "u-0,u-1,u-2" {
				t.Errorf("keys %v", c.keys)
			}
		}},
		{"slow_ordered gets a default key", []string{"--channel", "slow_ordered"}, "", func(t *testing.T, c benchConfig) {
			if c.channel == nil || *c.channel != idl.Channel_SLOW_ORDERED || len(c.keys) != 1 || c.keys[0] != "bench" {
				t.Errorf("channel %v keys %v", c.channel, c.keys)
			}
		}},
		{"slow_ordered with keys", []string{"--channel", "slow_ordered", "--sub-key", "u", "--keys", "2"}, "", func(t *testing.T, c benchConfig) {
			if strings.Join(c.keys, ",") != "u-0,u-1" {
				t.Errorf("keys %v", c.keys)
			}
		}},
		{"quiet wins", []string{"--quiet", "--progress", "5s"}, "", func(t *testing.T, c benchConfig) {
			if c.progress != 0 {
				t.Errorf("progress %v", c.progress)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{}, base...), c.args...)
			cfg, err := parseBenchFlags(args, io.Discard)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if c.check != nil {
					c.check(t, cfg)
				}
				return
			}
			var u usageError
			if err == nil || !errors.As(err, &u) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v; want a usage error mentioning %q", err, c.wantErr)
			}
			if exitCode(err) != 2 {
				t.Fatalf("exit code %d, want 2", exitCode(err))
			}
		})
	}
}

// fakeServer answers NextIDs from a counter; dupEvery > 0 makes every
// dupEvery-th answer repeat the previous ID.
type fakeServer struct {
	mu       sync.Mutex
	next     int64
	calls    int64
	dupEvery int64
	failCode *idl.ErrorCode
	sent     atomic.Int64
}

func (f *fakeServer) call(_ context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
	f.sent.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failCode != nil && f.calls%2 == 0 {
		return nil, &idl.IdgenError{Code: *f.failCode, Message: "fake refusal"}
	}
	n := int64(req.Count)
	first := f.next + 1
	if f.dupEvery > 0 && f.calls%f.dupEvery == 0 {
		first = f.next // overlaps the previous answer by one
	}
	f.next = first + n - 1
	return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: first, Last: f.next}}, Count: n}, nil
}

func benchCfg(t *testing.T, args ...string) benchConfig {
	t.Helper()
	cfg, err := parseBenchFlags(append([]string{"--addr", "x:1", "--biz", "b", "--quiet"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestRunBench(t *testing.T) {
	var plant bool
	t.Run("clean run with check", func(t *testing.T) {
		f := &fakeServer{}
		cfg := benchCfg(t, "--requests", "5000", "--concurrency", "8", "--count", "3", "--check")
		res := runBench(context.Background(), cfg, f.call, nil)
		if res.OK != 5000 || res.IDs != 15000 || res.Failed != 0 || f.sent.Load() != 5000 {
			t.Fatalf("ok %d ids %d failed %d sent %d", res.OK, res.IDs, res.Failed, f.sent.Load())
		}
		if res.Check == nil || res.Check.Checked != 15000 || res.Check.Duplicates != 0 || res.verdict() != nil {
			t.Fatalf("check %+v verdict %v", res.Check, res.verdict())
		}
		if res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P999 {
			t.Fatalf("latency %+v", res.Latency)
		}
	})
	t.Run("planted duplicate fails the run", func(t *testing.T) {
		f := &fakeServer{dupEvery: 997}
		cfg := benchCfg(t, "--requests", "3000", "--concurrency", "4", "--check", "--warmup", "1ns")
		res := runBench(context.Background(), cfg, f.call, nil)
		err := res.verdict()
		if res.Check.Duplicates < 3 || err == nil || !strings.Contains(err.Error(), "duplicate") || exitCode(err) != 1 {
			t.Fatalf("duplicates %d, verdict %v", res.Check.Duplicates, err)
		}
	})
	t.Run("errors by code", func(t *testing.T) {
		code := idl.ErrorCode_RATE_LIMITED
		f := &fakeServer{failCode: &code}
		cfg := benchCfg(t, "--requests", "100", "--concurrency", "1")
		res := runBench(context.Background(), cfg, f.call, nil)
		if res.Errors["RATE_LIMITED"] != 50 || res.OK != 50 || res.verdict() != nil {
			t.Fatalf("errors %v ok %d verdict %v", res.Errors, res.OK, res.verdict())
		}
	})
	t.Run("short answer is a bad response", func(t *testing.T) {
		short := func(context.Context, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
			return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: 1, Last: 1}}, Count: 1}, nil
		}
		cfg := benchCfg(t, "--requests", "10", "--count", "5")
		res := runBench(context.Background(), cfg, short, nil)
		if res.Errors["BAD_RESPONSE"] != 10 || res.verdict() == nil {
			t.Fatalf("errors %v verdict %v", res.Errors, res.verdict())
		}
	})
	t.Run("ordered answers going backwards", func(t *testing.T) {
		var mu sync.Mutex
		next := int64(1000)
		down := func(context.Context, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			next--
			return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: next, Last: next}}, Count: 1}, nil
		}
		cfg := benchCfg(t, "--requests", "50", "--concurrency", "1", "--channel", "ordered", "--check")
		res := runBench(context.Background(), cfg, down, nil)
		if res.Check.OrderViolations == nil || *res.Check.OrderViolations != 49 || res.verdict() == nil {
			t.Fatalf("check %+v verdict %v", res.Check, res.verdict())
		}
	})
	// SLOW_ORDERED is served as ORDERED: the same per-key order check
	// applies, and the report names the channel.
	t.Run("slow_ordered answers going backwards", func(t *testing.T) {
		for _, c := range []struct {
			step       int64
			violations int64
		}{{1, 0}, {-1, 49}} {
			var mu sync.Mutex
			next := int64(1000)
			call := func(_ context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
				mu.Lock()
				defer mu.Unlock()
				if req.GetChannel() != idl.Channel_SLOW_ORDERED || req.GetSubKey() != "bench" {
					return nil, &idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT, Message: "channel " + req.GetChannel().String() + " sub key " + req.GetSubKey()}
				}
				next += c.step
				return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: next, Last: next}}, Channel: idl.Channel_SLOW_ORDERED, Count: 1}, nil
			}
			cfg := benchCfg(t, "--requests", "50", "--concurrency", "1", "--channel", "slow_ordered", "--check")
			res := runBench(context.Background(), cfg, call, nil)
			if res.OK != 50 || res.Channel != "slow_ordered" || res.Check.OrderViolations == nil || *res.Check.OrderViolations != c.violations ||
				(res.verdict() == nil) != (c.violations == 0) {
				t.Fatalf("step %d: ok %d channel %q errors %v check %+v verdict %v", c.step, res.OK, res.Channel, res.Errors, res.Check, res.verdict())
			}
		}
	})
	t.Run("ordered numbers repeat across keys, not within one", func(t *testing.T) {
		var mu sync.Mutex
		next := map[string]int64{}
		planted := false
		perKey := func(_ context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			k := req.GetSubKey()
			first := next[k] + 1
			if k == "s-2" && first == 50 && !planted && plant {
				planted = true
				first-- // hand out 49 twice for key s-2
			}
			next[k] = first + int64(req.Count) - 1
			return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: first, Last: next[k]}}, Count: int64(req.Count)}, nil
		}
		cfg := benchCfg(t, "--requests", "2000", "--concurrency", "4", "--channel", "ordered", "--sub-key", "s", "--keys", "5", "--check")
		plant = false
		res := runBench(context.Background(), cfg, perKey, nil)
		if res.Check.Duplicates != 0 || res.Check.Checked != 2000 || res.verdict() != nil {
			t.Fatalf("clean: check %+v verdict %v", res.Check, res.verdict())
		}
		plant = true
		next = map[string]int64{}
		res = runBench(context.Background(), cfg, perKey, nil)
		if res.Check.Duplicates != 1 || len(res.Check.Examples) != 1 || res.Check.Examples[0] != 49 || res.verdict() == nil {
			t.Fatalf("planted: check %+v verdict %v", res.Check, res.verdict())
		}
	})
	t.Run("interrupted run stops and says so", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		f := &fakeServer{}
		slow := func(ctx context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
			if f.sent.Load() >= 100 { // >=: two callers can both pass 99 and skip 100
				cancel()
			}
			return f.call(ctx, req)
		}
		cfg := benchCfg(t, "--duration", "1h", "--concurrency", "2")
		res := runBench(ctx, cfg, slow, nil)
		if !res.Interrupted || res.verdict() == nil {
			t.Fatalf("interrupted %v verdict %v", res.Interrupted, res.verdict())
		}
	})
}

func TestProgressLine(t *testing.T) {
	got := progressLine("bench", 5*time.Second, 10*time.Second, 0, 100, 2, 20, 40, true)
	if !strings.Contains(got, "5.0s/10.0s") || !strings.Contains(got, "50%") || !strings.Contains(got, "2 errors") ||
		!strings.Contains(got, "[############------------]") {
		t.Fatalf("line %q", got)
	}
	got = progressLine("bench", 0, 0, 200, 50, 0, 0, 0, false)
	if !strings.Contains(got, "50/200 req") || strings.Contains(got, "[") {
		t.Fatalf("line %q", got)
	}
}

func TestWriteBenchResult(t *testing.T) {
	f := &fakeServer{}
	cfg := benchCfg(t, "--requests", "10", "--check", "--json")
	res := runBench(context.Background(), cfg, f.call, nil)
	var sb strings.Builder
	if err := writeBenchResult(&sb, cfg, res); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `"requests_per_s"`) || !strings.Contains(out, `"duplicates":0`) {
		t.Fatalf("json %q", out)
	}
	cfg.asJSON = false
	sb.Reset()
	if err := writeBenchResult(&sb, cfg, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "p99.9") || !strings.Contains(sb.String(), "0 duplicates") {
		t.Fatalf("text %q", sb.String())
	}
}

// TestParseBenchTargets: --addr takes one node or a list, --zk discovers
// the nodes (with --cluster and --zk-root); both at once are refused.
func TestParseBenchTargets(t *testing.T) {
	t.Setenv("IDGEN_ADDR", "")
	t.Setenv("IDGEN_CLUSTER", "")
	t.Setenv("IDGEN_ZK_ROOT", "")
	for _, c := range []struct {
		name    string
		args    []string
		wantErr string // "" means valid
		check   func(t *testing.T, c benchConfig)
	}{
		{"one node", []string{"--addr", "10.0.0.1:8888"}, "", func(t *testing.T, c benchConfig) {
			if !slices.Equal(c.addrs, []string{"10.0.0.1:8888"}) || c.zk != nil || c.addr != "10.0.0.1:8888" {
				t.Errorf("addrs %v zk %v addr %q", c.addrs, c.zk, c.addr)
			}
		}},
		{"default node", nil, "", func(t *testing.T, c benchConfig) {
			if !slices.Equal(c.addrs, []string{"127.0.0.1:8888"}) || c.zk != nil {
				t.Errorf("addrs %v zk %v", c.addrs, c.zk)
			}
		}},
		{"a list of nodes", []string{"--addr", "a:1, b:2,c:3,"}, "", func(t *testing.T, c benchConfig) {
			if !slices.Equal(c.addrs, []string{"a:1", "b:2", "c:3"}) || c.addr != "a:1,b:2,c:3" {
				t.Errorf("addrs %v addr %q", c.addrs, c.addr)
			}
		}},
		{"a list item without a port", []string{"--addr", "a:1,b"}, `--addr "b": want host:port`, nil},
		{"an empty list", []string{"--addr", " , "}, "--addr HOST:PORT is required", nil},
		{"discovery with defaults", []string{"--zk", "z1:2181,z2:2181"}, "", func(t *testing.T, c benchConfig) {
			if !slices.Equal(c.zk, []string{"z1:2181", "z2:2181"}) || c.addrs != nil || c.cluster != "default" || c.zkRoot != "/idgen" ||
				c.addr != "zk:z1:2181,z2:2181/idgen/default" {
				t.Errorf("zk %v addrs %v cluster %q root %q addr %q", c.zk, c.addrs, c.cluster, c.zkRoot, c.addr)
			}
		}},
		{"discovery of a cluster", []string{"--zk", "z:2181", "--cluster", "prod", "--zk-root", "/ids"}, "", func(t *testing.T, c benchConfig) {
			if c.cluster != "prod" || c.zkRoot != "/ids" || c.addrs != nil {
				t.Errorf("cluster %q root %q addrs %v", c.cluster, c.zkRoot, c.addrs)
			}
		}},
		{"addr and zk", []string{"--addr", "a:1", "--zk", "z:2181"}, "--addr and --zk are exclusive", nil},
		{"empty zk", []string{"--zk", ","}, "--zk", nil},
		{"cluster without zk", []string{"--addr", "a:1", "--cluster", "prod"}, "give --zk too", nil},
		{"zk-root without zk", []string{"--zk-root", "/x"}, "give --zk too", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseBenchFlags(append([]string{"--biz", "b"}, c.args...), io.Discard)
			if c.wantErr != "" {
				var ue usageError
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.As(err, &ue) {
					t.Fatalf("err = %v, want a usage error containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
	// IDGEN_ADDR may hold a list too.
	t.Setenv("IDGEN_ADDR", "a:1,b:2")
	cfg, err := parseBenchFlags([]string{"--biz", "b"}, io.Discard)
	if err != nil || !slices.Equal(cfg.addrs, []string{"a:1", "b:2"}) {
		t.Fatalf("IDGEN_ADDR list: %v %v", cfg.addrs, err)
	}
}

// TestBenchRouting: the report gives the change of the client's routing
// counters over the measured phase (the warm-up's calls left out), for
// requests with sub keys only.
func TestBenchRouting(t *testing.T) {
	call := func(ctx context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: 1, Last: 1}}, Count: 1}, nil
	}
	cfg, err := parseBenchFlags([]string{"--addr", "x:1", "--biz", "b", "--quiet", "--requests", "10", "--channel", "ordered"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// Read once before the measured phase, once after it.
	reads := []client.Stats{{OrderedToOwner: 5, OrderedElsewhere: 3}, {OrderedToOwner: 14, OrderedElsewhere: 4, OrderedOwnerFallbacks: 2}}
	cfg.routing = func() client.Stats {
		st := reads[0]
		reads = reads[1:]
		return st
	}
	res := runBench(context.Background(), cfg, call, nil)
	want := routingResult{ToOwner: 9, Elsewhere: 1, OwnerFallbacks: 2}
	if res.Routing == nil || *res.Routing != want {
		t.Fatalf("routing %+v, want %+v", res.Routing, want)
	}
	var sb strings.Builder
	if err := writeBenchResult(&sb, cfg, res); err != nil || !strings.Contains(sb.String(), "9 to the owner first (2 of them fell back elsewhere), 1 elsewhere") {
		t.Fatalf("report %q (%v) does not give the routing", sb.String(), err)
	}

	// No sub keys: no routing figures.
	cfg.keys = nil
	if res := runBench(context.Background(), cfg, call, nil); res.Routing != nil {
		t.Fatalf("routing %+v without sub keys", res.Routing)
	}
}
