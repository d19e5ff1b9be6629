package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// goBench is one line of `go test -bench` output.
type goBench struct {
	Name    string             // without the -GOMAXPROCS suffix
	Metrics map[string]float64 // unit -> value: ns/op, ids/s, ...
}

var procSuffix = regexp.MustCompile(`-\d+$`)

// parseGoBench reads benchmark result lines and ignores everything else.
func parseGoBench(r io.Reader) ([]goBench, error) {
	var out []goBench
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue // not a result line (e.g. a log line starting with the name)
		}
		b := goBench{Name: procSuffix.ReplaceAllString(f[0], ""), Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %q: %w", f[0], f[i], err)
			}
			b.Metrics[f[i+1]] = v
		}
		out = append(out, b)
	}
	return out, sc.Err()
}

// goBenchColumns are the units shown, in order, when any line has them.
var goBenchColumns = []string{"ns/op", "ids/s", "ns/id", "p99-ns", "p99.9-ns", "p99-ms", "retries/op", "B/op", "allocs/op"}

// writeGoBenchTable prints one row per benchmark name: median (min-max)
// of every unit over the repeated runs (-count).
func writeGoBenchTable(w io.Writer, bs []goBench) error {
	var order []string
	by := map[string][]goBench{}
	present := map[string]bool{}
	for _, b := range bs {
		if _, ok := by[b.Name]; !ok {
			order = append(order, b.Name)
		}
		by[b.Name] = append(by[b.Name], b)
		for u := range b.Metrics {
			present[u] = true
		}
	}
	var cols []string
	for _, u := range goBenchColumns {
		if present[u] {
			cols = append(cols, u)
		}
	}
	var sb strings.Builder
	sb.WriteString("| benchmark | runs | " + strings.Join(cols, " | ") + " |\n|---|---:|")
	sb.WriteString(strings.Repeat("---:|", len(cols)) + "\n")
	for _, name := range order {
		fmt.Fprintf(&sb, "| %s | %d |", name, len(by[name]))
		for _, u := range cols {
			var vals []float64
			for _, b := range by[name] {
				if v, ok := b.Metrics[u]; ok {
					vals = append(vals, v)
				}
			}
			s := summarize(vals)
			switch {
			case s.N == 0:
				sb.WriteString(" - |")
			case s.N == 1 || s.Min == s.Max:
				fmt.Fprintf(&sb, " %s |", num(s.Median))
			default:
				fmt.Fprintf(&sb, " %s (%s-%s) |", num(s.Median), num(s.Min), num(s.Max))
			}
		}
		sb.WriteString("\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// num prints a figure with SI suffixes above 10k and 3 significant digits.
func num(v float64) string {
	if v >= 1e4 {
		return si(v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
