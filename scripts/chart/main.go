// Command chart turns the load-run results of scripts/bench.sh (idctl
// bench over RPC) into the tables and the chart of BENCHMARKS.md. Standard
// library only. The Go benchmarks are summarised and compared by benchstat
// (bench.sh runs `go tool -modfile=tools/go.mod benchstat`), not here.
//
//	go run ./scripts/chart table -in bench/results/latest.jsonl [-ratio NAME=A/B:FIELD]...
//	go run ./scripts/chart svg   -in bench/results/latest.jsonl -out docs/bench-latency.svg [-groups S=LABEL,...]
//
// table prints a markdown table of every scenario (median and min-max over
// its runs), the ratios asked for (computed per run, paired by run number,
// then summarised the same way) and the server RSS where it was recorded.
// svg draws latency percentiles (p50, p99, p99.9) per group of scenarios.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  chart table -in FILE [-ratio NAME=A/B:FIELD]...
  chart svg   -in FILE -out FILE.svg [-groups SCENARIO=LABEL,...] [-title T]
(Go benchmark output: go tool -modfile=tools/go.mod benchstat FILE...)
`

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing subcommand")
	}
	fs := flag.NewFlagSet("chart "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "bench/results/latest.jsonl", "results file (JSON lines from scripts/bench.sh)")
	switch args[0] {
	case "table":
		var ratios ratioFlags
		fs.Var(&ratios, "ratio", "NAME=A/B:FIELD, e.g. rpc-c16=idgen-c16/noop-c16:rps (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		runs, err := readRuns(*in)
		if err != nil {
			return err
		}
		return writeTable(stdout, runs, ratios)
	case "svg":
		out := fs.String("out", "docs/bench-latency.svg", "SVG file to write")
		groups := fs.String("groups", defaultGroups, "scenarios to draw, in order, as SCENARIO=LABEL,...")
		title := fs.String("title", "NextIDs latency by channel", "chart title")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		runs, err := readRuns(*in)
		if err != nil {
			return err
		}
		gs, err := parseGroups(*groups)
		if err != nil {
			return err
		}
		svg, err := renderSVG(runs, gs, *title)
		if err != nil {
			return err
		}
		return os.WriteFile(*out, []byte(svg), 0o644)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown subcommand %q", args[0])
}

const defaultGroups = "noop-c16=no-op floor,idgen-c16=snowflake,unordered-c16=unordered,ordered-c16=ordered"

// runLine is one line of the results file: one `idctl bench --json` result
// with what scripts/bench.sh knew about it.
type runLine struct {
	Scenario  string     `json:"scenario"`
	Server    string     `json:"server"`
	Rep       int        `json:"rep"`
	RSSMaxKiB int64      `json:"rss_max_kib,omitempty"` // largest VmRSS sampled during the run
	HWMKiB    int64      `json:"hwm_kib,omitempty"`     // VmHWM after the run
	Result    benchStats `json:"result"`
}

// benchStats is the part of idctl's benchResult the tables use.
type benchStats struct {
	Concurrency int                `json:"concurrency"`
	Count       int                `json:"count"`
	Channel     string             `json:"channel"`
	OK          int64              `json:"ok"`
	Failed      int64              `json:"failed"`
	RPS         float64            `json:"requests_per_s"`
	IDsPerS     float64            `json:"ids_per_s"`
	Latency     map[string]float64 `json:"latency_us"`
	Errors      map[string]int64   `json:"errors"`
	Check       *struct {
		Checked    int64 `json:"ids_checked"`
		Duplicates int64 `json:"duplicates"`
	} `json:"check"`
}

func readRuns(path string) ([]runLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseRuns(f)
}

func parseRuns(r io.Reader) ([]runLine, error) {
	var runs []runLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var rl runLine
		if err := json.Unmarshal([]byte(line), &rl); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if rl.Scenario == "" {
			return nil, fmt.Errorf("line %d: no scenario", n)
		}
		runs = append(runs, rl)
	}
	return runs, sc.Err()
}

// field returns one figure of a run by name.
func field(r runLine, name string) (float64, bool) {
	switch name {
	case "rps":
		return r.Result.RPS, true
	case "ids":
		return r.Result.IDsPerS, true
	case "p50", "p95", "p99", "max", "mean", "min":
		v, ok := r.Result.Latency[name]
		return v, ok
	case "p999":
		v, ok := r.Result.Latency["p99_9"]
		return v, ok
	case "rss":
		return float64(r.RSSMaxKiB), r.RSSMaxKiB > 0
	case "hwm":
		return float64(r.HWMKiB), r.HWMKiB > 0
	}
	return 0, false
}

// summary is a median with the range it came from.
type summary struct {
	Median, Min, Max float64
	N                int
}

func summarize(vals []float64) summary {
	if len(vals) == 0 {
		return summary{}
	}
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return summary{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// scenarios returns the scenario names in first-seen order and the runs
// of each.
func scenarios(runs []runLine) ([]string, map[string][]runLine) {
	var order []string
	by := map[string][]runLine{}
	for _, r := range runs {
		if _, ok := by[r.Scenario]; !ok {
			order = append(order, r.Scenario)
		}
		by[r.Scenario] = append(by[r.Scenario], r)
	}
	return order, by
}

func collect(rs []runLine, name string) []float64 {
	var out []float64
	for _, r := range rs {
		if v, ok := field(r, name); ok {
			out = append(out, v)
		}
	}
	return out
}

// ratio is a -ratio flag: NAME=A/B:FIELD.
type ratio struct{ name, num, den, field string }

type ratioFlags []ratio

func (f *ratioFlags) String() string { return fmt.Sprint(*f) }

func (f *ratioFlags) Set(s string) error {
	name, rest, ok1 := strings.Cut(s, "=")
	pair, fld, ok2 := strings.Cut(rest, ":")
	num, den, ok3 := strings.Cut(pair, "/")
	if !ok1 || !ok2 || !ok3 || name == "" || num == "" || den == "" {
		return fmt.Errorf("ratio %q: want NAME=A/B:FIELD", s)
	}
	if !knownField(fld) {
		return fmt.Errorf("ratio %q: unknown field %q (rps, ids, p50, p95, p99, p999, max, mean, rss, hwm)", s, fld)
	}
	*f = append(*f, ratio{name, num, den, fld})
	return nil
}

func knownField(f string) bool {
	switch f {
	case "rps", "ids", "p50", "p95", "p99", "p999", "max", "mean", "min", "rss", "hwm":
		return true
	}
	return false
}

// pairedRatio computes num/den per run number, for runs present in both.
func pairedRatio(by map[string][]runLine, rt ratio) []float64 {
	den := map[int]float64{}
	for _, r := range by[rt.den] {
		if v, ok := field(r, rt.field); ok && v != 0 {
			den[r.Rep] = v
		}
	}
	var out []float64
	for _, r := range by[rt.num] {
		if v, ok := field(r, rt.field); ok {
			if d, ok := den[r.Rep]; ok {
				out = append(out, v/d)
			}
		}
	}
	return out
}
