package main

import (
	"errors"
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// group is one cluster of bars: a scenario and its label.
type group struct{ scenario, label string }

func parseGroups(s string) ([]group, error) {
	var gs []group
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		sc, label, ok := strings.Cut(part, "=")
		if !ok {
			label = sc
		}
		if sc == "" {
			return nil, fmt.Errorf("groups: empty scenario in %q", part)
		}
		gs = append(gs, group{strings.TrimSpace(sc), strings.TrimSpace(label)})
	}
	if len(gs) == 0 {
		return nil, errors.New("groups: none given")
	}
	return gs, nil
}

// percentiles drawn per group, with their colours.
var percentiles = []struct{ field, label, color string }{
	{"p50", "p50", "#4e79a7"},
	{"p99", "p99", "#f28e2b"},
	{"p999", "p99.9", "#e15759"},
}

// renderSVG draws grouped bars of the median latency percentiles of each
// group on a log scale, with a whisker for the min-max over runs.
func renderSVG(runs []runLine, groups []group, title string) (string, error) {
	_, by := scenarios(runs)
	type bar struct {
		s     summary
		color string
	}
	var bars [][]bar
	var shown []group
	lo, hi := math.Inf(1), math.Inf(-1)
	var subtitle string
	for _, g := range groups {
		rs := by[g.scenario]
		if len(rs) == 0 {
			continue
		}
		if subtitle == "" {
			r := rs[0].Result
			subtitle = fmt.Sprintf("median of %d runs (whiskers: min-max), concurrency %d, %d ID per call, log scale",
				len(rs), r.Concurrency, r.Count)
		}
		var row []bar
		for _, p := range percentiles {
			s := summarize(collect(rs, p.field))
			if s.N > 0 && s.Min > 0 {
				lo, hi = math.Min(lo, s.Min), math.Max(hi, s.Max)
			}
			row = append(row, bar{s, p.color})
		}
		bars = append(bars, row)
		shown = append(shown, g)
	}
	if len(shown) == 0 {
		return "", errors.New("svg: none of the groups' scenarios is in the results")
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	decLo, decHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if decHi <= decLo {
		decHi = decLo + 1
	}

	const (
		width, height            = 820, 460
		left, right, top, bottom = 80, 20, 70, 70
		barGap, groupGapRatio    = 4, 0.35
	)
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	groupW := plotW / float64(len(shown))
	bw := groupW * (1 - groupGapRatio) / float64(len(percentiles))
	y := func(us float64) float64 {
		if us <= 0 {
			return float64(top) + plotH
		}
		f := (math.Log10(us) - decLo) / (decHi - decLo)
		return float64(top) + plotH*(1-f)
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&sb, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	fmt.Fprintf(&sb, `<text x="%d" y="44" fill="#555">%s</text>`+"\n", left, html.EscapeString(subtitle))
	// grid: 1, 2, 5 per decade
	for d := decLo; d <= decHi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if math.Log10(v) > decHi+1e-9 {
				break
			}
			yy := y(v)
			stroke, dash := "#ccc", ` stroke-dasharray="3,3"`
			if m == 1 {
				stroke, dash = "#999", ""
			}
			fmt.Fprintf(&sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"%s/>`+"\n", left, yy, width-right, yy, stroke, dash)
			fmt.Fprintf(&sb, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", left-6, yy+4, tick(v))
		}
	}
	fmt.Fprintf(&sb, `<text x="18" y="%.1f" transform="rotate(-90 18 %.1f)" text-anchor="middle" fill="#333">latency</text>`+"\n",
		float64(top)+plotH/2, float64(top)+plotH/2)
	for gi, row := range bars {
		x0 := float64(left) + groupW*float64(gi) + groupW*groupGapRatio/2
		for bi, b := range row {
			if b.s.N == 0 {
				continue
			}
			x := x0 + bw*float64(bi)
			top := y(b.s.Median)
			fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s (%s-%s)</title></rect>`+"\n",
				x+barGap/2, top, bw-barGap, y(0)-top, b.color, html.EscapeString(shown[gi].label), percentiles[bi].label,
				dur(b.s.Median), dur(b.s.Min), dur(b.s.Max))
			cx := x + bw/2
			if b.s.Max > b.s.Min {
				fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/>`+"\n", cx, y(b.s.Min), cx, y(b.s.Max))
				for _, v := range []float64{b.s.Min, b.s.Max} {
					fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/>`+"\n", cx-3, y(v), cx+3, y(v))
				}
			}
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="#222">%s</text>`+"\n",
				cx, math.Min(top, y(b.s.Max))-4, dur(b.s.Median))
		}
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			float64(left)+groupW*(float64(gi)+0.5), height-bottom+20, html.EscapeString(shown[gi].label))
	}
	fmt.Fprintf(&sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", left, y(0), width-right, y(0))
	for i, p := range percentiles {
		lx := left + i*90
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			lx, height-28, p.color, lx+16, height-18, p.label)
	}
	sb.WriteString("</svg>\n")
	return sb.String(), nil
}

// tick formats a round axis value (microseconds) without trailing zeros.
func tick(us float64) string {
	switch {
	case us >= 1e6:
		return strconv.FormatFloat(us/1e6, 'g', -1, 64) + "s"
	case us >= 1e3:
		return strconv.FormatFloat(us/1e3, 'g', -1, 64) + "ms"
	}
	return strconv.FormatFloat(us, 'g', -1, 64) + "µs"
}
