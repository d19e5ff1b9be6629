package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// writeTable prints the scenario table, the ratios and the RSS table.
func writeTable(w io.Writer, runs []runLine, ratios []ratio) error {
	order, by := scenarios(runs)
	var sb strings.Builder
	sb.WriteString("| scenario | conc. | IDs/call | runs | requests/s | IDs/s | p50 | p99 | p99.9 | max | failed | duplicates |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range order {
		rs := by[name]
		first := rs[0].Result
		var failed, dups int64
		checked := false
		codes := map[string]int64{}
		for _, r := range rs {
			failed += r.Result.Failed
			for c, n := range r.Result.Errors {
				codes[c] += n
			}
			if r.Result.Check != nil {
				checked = true
				dups += r.Result.Check.Duplicates
			}
		}
		failedCell := fmt.Sprint(failed)
		if len(codes) > 0 {
			var parts []string
			for _, c := range slices.Sorted(maps.Keys(codes)) {
				parts = append(parts, fmt.Sprintf("%s %d", c, codes[c]))
			}
			failedCell += " (" + strings.Join(parts, ", ") + ")"
		}
		dupCell := "not checked"
		if checked {
			dupCell = fmt.Sprint(dups)
		}
		fmt.Fprintf(&sb, "| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, first.Concurrency,
			first.Count, len(rs), fmtCount(summarize(collect(rs, "rps"))), fmtCount(summarize(collect(rs, "ids"))),
			fmtLat(summarize(collect(rs, "p50"))), fmtLat(summarize(collect(rs, "p99"))),
			fmtLat(summarize(collect(rs, "p999"))), fmtLat(summarize(collect(rs, "max"))), failedCell, dupCell)
	}
	if len(ratios) > 0 {
		sb.WriteString("\n| ratio | field | median (min-max over paired runs) | runs |\n|---|---|---:|---:|\n")
		for _, rt := range ratios {
			s := summarize(pairedRatio(by, rt))
			cell := "no paired runs"
			if s.N > 0 {
				cell = fmt.Sprintf("%.2f (%.2f-%.2f)", s.Median, s.Min, s.Max)
			}
			fmt.Fprintf(&sb, "| %s = %s / %s | %s | %s | %d |\n", rt.name, rt.num, rt.den, rt.field, cell, s.N)
		}
	}
	var rssRows []string
	for _, name := range order {
		rss, hwm := summarize(collect(by[name], "rss")), summarize(collect(by[name], "hwm"))
		if rss.N == 0 && hwm.N == 0 {
			continue
		}
		rssRows = append(rssRows, fmt.Sprintf("| %s | %s | %s | %d |", name, fmtMiB(rss), fmtMiB(hwm), max(rss.N, hwm.N)))
	}
	if len(rssRows) > 0 {
		sb.WriteString("\n| scenario | server RSS during the run (largest sample) | server VmHWM after the run | runs |\n|---|---:|---:|---:|\n")
		sb.WriteString(strings.Join(rssRows, "\n") + "\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// fmtCount formats a rate summary as "12.3k (11.9k-12.8k)".
func fmtCount(s summary) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 || s.Min == s.Max {
		return si(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", si(s.Median), si(s.Min), si(s.Max))
}

func si(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// fmtLat formats a latency summary (microseconds).
func fmtLat(s summary) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 || s.Min == s.Max {
		return dur(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", dur(s.Median), dur(s.Min), dur(s.Max))
}

// dur formats microseconds.
func dur(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.0fµs", us)
}

func fmtMiB(s summary) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 || s.Min == s.Max {
		return fmt.Sprintf("%.1f MiB", s.Median/1024)
	}
	return fmt.Sprintf("%.1f MiB (%.1f-%.1f)", s.Median/1024, s.Min/1024, s.Max/1024)
}
