package main

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

const sample = `{"scenario":"noop-c16","server":"noop","rep":1,"result":{"concurrency":16,"count":1,"ok":100,"requests_per_s":1000,"ids_per_s":1000,"latency_us":{"p50":100,"p99":400,"p99_9":900,"max":1000},"errors":{}}}
{"scenario":"idgen-c16","server":"idgen","rep":1,"rss_max_kib":20480,"hwm_kib":30720,"result":{"concurrency":16,"count":1,"ok":90,"failed":2,"requests_per_s":900,"ids_per_s":900,"latency_us":{"p50":110,"p99":500,"p99_9":1200,"max":2000},"errors":{"RPC_TIMEOUT":2},"check":{"ids_checked":90,"duplicates":0}}}
{"scenario":"noop-c16","server":"noop","rep":2,"result":{"concurrency":16,"count":1,"requests_per_s":2000,"ids_per_s":2000,"latency_us":{"p50":120,"p99":420,"p99_9":950,"max":1100}}}
{"scenario":"idgen-c16","server":"idgen","rep":2,"result":{"concurrency":16,"count":1,"requests_per_s":1900,"ids_per_s":1900,"latency_us":{"p50":130,"p99":520,"p99_9":1300,"max":2100},"check":{"ids_checked":90,"duplicates":0}}}
{"scenario":"noop-c16","server":"noop","rep":3,"result":{"concurrency":16,"count":1,"requests_per_s":1500,"ids_per_s":1500,"latency_us":{"p50":110,"p99":410,"p99_9":920,"max":1050}}}
{"scenario":"idgen-c16","server":"idgen","rep":3,"result":{"concurrency":16,"count":1,"requests_per_s":1200,"ids_per_s":1200,"latency_us":{"p50":120,"p99":510,"p99_9":1250,"max":2050},"check":{"ids_checked":90,"duplicates":0}}}
`

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want summary
	}{
		{nil, summary{}},
		{[]float64{5}, summary{5, 5, 5, 1}},
		{[]float64{3, 1, 2}, summary{2, 1, 3, 3}},
		{[]float64{4, 1, 3, 2}, summary{2.5, 1, 4, 4}},
	} {
		if got := summarize(c.in); got != c.want {
			t.Errorf("summarize(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestTable(t *testing.T) {
	runs, err := parseRuns(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var rf ratioFlags
	if err := rf.Set("rpc-c16=idgen-c16/noop-c16:rps"); err != nil {
		t.Fatal(err)
	}
	if err := rf.Set("bad=idgen-c16/noop-c16:speed"); err == nil {
		t.Fatal("unknown field accepted")
	}
	var sb strings.Builder
	if err := writeTable(&sb, runs, rf); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{
		"| noop-c16 | 16 | 1 | 3 | 1.5k (1.0k-2.0k) |",
		"RPC_TIMEOUT 2",
		"| not checked |",
		// per-run ratios 0.9, 0.95, 0.8 -> median 0.90
		"| rpc-c16 = idgen-c16 / noop-c16 | rps | 0.90 (0.80-0.95) | 3 |",
		"| idgen-c16 | 20.0 MiB | 30.0 MiB | 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSVG(t *testing.T) {
	runs, err := parseRuns(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	gs, err := parseGroups("noop-c16=no-op <floor>,idgen-c16=snowflake,missing=absent")
	if err != nil {
		t.Fatal(err)
	}
	svg, err := renderSVG(runs, gs, "latency & co")
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(svg))
	rects := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	// background + 2 groups x 3 percentiles + 3 legend boxes
	if rects != 1+6+3 {
		t.Errorf("%d rects", rects)
	}
	if !strings.Contains(svg, "no-op &lt;floor&gt;") || strings.Contains(svg, "absent") {
		t.Error("labels not escaped or missing group drawn")
	}
	if _, err := renderSVG(runs, []group{{"nothing", "x"}}, "t"); err == nil {
		t.Error("no data should be an error")
	}
}

// TestGoBenchIsBenchstat: Go benchmark output is benchstat's job; the
// subcommand that summarised it is gone and the usage says where to go.
func TestGoBenchIsBenchstat(t *testing.T) {
	var stderr strings.Builder
	if err := run([]string{"gobench", "x.txt"}, io.Discard, &stderr); err == nil || !strings.Contains(err.Error(), "unknown subcommand") {
		t.Fatalf("chart gobench: %v", err)
	}
	if !strings.Contains(stderr.String(), "benchstat") {
		t.Fatalf("usage does not point to benchstat:\n%s", stderr.String())
	}
}
