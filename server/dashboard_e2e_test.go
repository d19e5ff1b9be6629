package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// The files checked here, relative to this package.
const (
	dashboardFile = "../deploy/grafana/idgen.json"
	alertsFile    = "../deploy/prometheus/alerts.yml"
	runbookFile   = "../docs/runbook.md"
)

// At least this many distinct metric names must be found in each file: an
// extraction that silently matches nothing (a changed layout, a broken
// pattern) fails instead of passing vacuously.
const (
	minDashboardMetrics = 40
	minAlertMetrics     = 12
)

// dashboardAllowMissing lists metrics the dashboard or the alerts may name
// although the node started by TestDashboardMetricsExported cannot export
// them, with the reason. Empty: with ZooKeeper and MySQL one node exports
// every metric referenced. An entry that is exported after all, or no
// longer referenced, fails the test (the list must not go stale).
var dashboardAllowMissing = map[string]string{}

// targetLabels are added by Prometheus (or its relabelling), never on
// /metrics, so matchers on them are not checked against the scrape.
var targetLabels = map[string]bool{"instance": true, "job": true, "cluster": true}

// metricRef is one metric name found in a PromQL expression, with the
// selector's label matchers.
type metricRef struct {
	name     string
	where    string // panel title, variable or alert name
	matchers []labelMatcher
}

type labelMatcher struct {
	label, op, value string
}

func (m labelMatcher) String() string { return fmt.Sprintf("%s%s%q", m.label, m.op, m.value) }

var (
	// metricName finds identifiers with an exported prefix (group 1) not
	// preceded by an identifier character (PromQL function and label names
	// have no such prefix; label names inside braces and grouping clauses
	// are blanked before the search).
	metricName = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:])((?:idgen|process|go)_[A-Za-z0-9_:]*)`)
	// grouping clauses list label names, never metrics.
	grouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	matcher  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	// literalAlternatives is a regex matcher value that is a plain list
	// of label values (a|b|c), checked value by value.
	literalAlternatives = regexp.MustCompile(`^[A-Za-z0-9_.:-]+(\|[A-Za-z0-9_.:-]+)*$`)
)

// blankStrings replaces the contents of PromQL string literals (double,
// single or back quotes) with spaces, keeping every offset.
func blankStrings(expr string) string {
	b := []byte(expr)
	var quote byte
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case quote == 0 && (c == '"' || c == '\'' || c == '`'):
			quote = c
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0 && c == '\\' && quote != '`' && i+1 < len(b):
			b[i], b[i+1] = ' ', ' '
			i++
		case quote != 0:
			b[i] = ' '
		}
	}
	return string(b)
}

// closingBrace returns the index of the '}' that closes the '{' at open in
// s (strings already blanked), or -1.
func closingBrace(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// promqlMetrics returns the metrics expr names (identifiers starting with
// idgen_, process_ or go_) with their selectors' matchers.
func promqlMetrics(expr, where string) []metricRef {
	strs := blankStrings(expr)
	// Blank selector bodies and grouping clauses: what is left of an
	// identifier there is a label name.
	names := []byte(strs)
	for i := 0; i < len(names); i++ {
		if names[i] == '{' {
			end := closingBrace(strs, i)
			if end < 0 {
				end = len(names) - 1
			}
			for j := i + 1; j < end; j++ {
				names[j] = ' '
			}
			i = end
		}
	}
	blanked := grouping.ReplaceAllStringFunc(string(names), func(s string) string { return strings.Repeat(" ", len(s)) })
	var out []metricRef
	for _, m := range metricName.FindAllStringSubmatchIndex(blanked, -1) {
		ref := metricRef{name: blanked[m[2]:m[3]], where: where}
		rest := m[3]
		for rest < len(strs) && (strs[rest] == ' ' || strs[rest] == '\n' || strs[rest] == '\t') {
			rest++
		}
		if rest < len(strs) && strs[rest] == '{' {
			if end := closingBrace(strs, rest); end > 0 {
				for _, mm := range matcher.FindAllStringSubmatch(expr[rest+1:end], -1) {
					ref.matchers = append(ref.matchers, labelMatcher{label: mm[1], op: mm[2], value: mm[3]})
				}
			}
		}
		out = append(out, ref)
	}
	return out
}

// TestDashboardPromQLExtraction pins what promqlMetrics finds: metric names
// and histogram suffixes, not functions, label names, grouping labels or
// string contents.
func TestDashboardPromQLExtraction(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.99, sum by (channel, le) (rate(idgen_rpc_duration_seconds_bucket{method="NextIDs", go_x=~"idgen_fake"}[$__rate_interval])))`,
			[]string{`idgen_rpc_duration_seconds_bucket{method="NextIDs" go_x=~"idgen_fake"}`}},
		{`sum by (go_label) (rate(process_cpu_seconds_total[5m])) / on (instance) group_left (go_other) go_goroutines`,
			[]string{"process_cpu_seconds_total", "go_goroutines"}},
		{`label_values(idgen_node_state{cluster=~"$cluster"}, instance)`, []string{`idgen_node_state{cluster=~"$cluster"}`}},
		{`max by (instance) (idgen_worker_state{state=~"fenced|none"}) == 1 unless idgen_x_total {a="}"}`,
			[]string{`idgen_worker_state{state=~"fenced|none"}`, `idgen_x_total{a="}"}`}},
		{`vector(1) > 0`, nil},
		{`abs(idgen_clock_offset_seconds)>0.5 and xidgen_not_this`, []string{"idgen_clock_offset_seconds"}},
	} {
		var got []string
		for _, r := range promqlMetrics(c.expr, "") {
			s := r.name
			if len(r.matchers) > 0 {
				var ms []string
				for _, m := range r.matchers {
					ms = append(ms, m.String())
				}
				s += "{" + strings.Join(ms, " ") + "}"
			}
			got = append(got, s)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("promqlMetrics(%s) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// dashboardExprs returns the dashboard's PromQL: every "expr" anywhere in
// it (panel targets, nested rows) and every query variable's query and
// definition, each with where it was found.
func dashboardExprs(t *testing.T, dash map[string]any) (exprs map[string][]string, panelTargets int) {
	t.Helper()
	exprs = map[string][]string{}
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch x := v.(type) {
		case map[string]any:
			if title, ok := x["title"].(string); ok && title != "" {
				where = "panel " + strconv.Quote(title)
			}
			for k, child := range x {
				if k == "expr" {
					s, ok := child.(string)
					if !ok {
						t.Errorf("%s: expr is %T, not a string", where, child)
						continue
					}
					exprs[where] = append(exprs[where], s)
					panelTargets++
					continue
				}
				if k == "templating" {
					continue // below, with the variables' own names
				}
				walk(child, where)
			}
		case []any:
			for _, child := range x {
				walk(child, where)
			}
		}
	}
	walk(dash, "dashboard")
	tmpl, _ := dash["templating"].(map[string]any)
	vars, _ := tmpl["list"].([]any)
	for _, v := range vars {
		vm, _ := v.(map[string]any)
		if vm["type"] != "query" {
			continue
		}
		where := fmt.Sprintf("variable $%v", vm["name"])
		if s, ok := vm["definition"].(string); ok && s != "" {
			exprs[where] = append(exprs[where], s)
		}
		switch q := vm["query"].(type) {
		case string:
			exprs[where] = append(exprs[where], q)
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				exprs[where] = append(exprs[where], s)
			}
		}
		if len(exprs[where]) == 0 {
			t.Errorf("%s: a query variable without a query", where)
		}
	}
	return exprs, panelTargets
}

func loadDashboard(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	if dec.More() {
		t.Fatalf("%s: data after the dashboard object", dashboardFile)
	}
	return dash
}

// alertRules is what the test reads of alerts.yml.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string `yaml:"alert"`
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) (exprs map[string][]string, alerts map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var r alertRules
	if err := yaml.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	exprs, alerts = map[string][]string{}, map[string]bool{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			name := rule.Alert
			if name == "" {
				name = rule.Record
			}
			if strings.TrimSpace(rule.Expr) == "" {
				t.Errorf("%s: rule %q has no expr", alertsFile, name)
				continue
			}
			if rule.Alert != "" {
				alerts[rule.Alert] = true
			}
			exprs["alert "+name] = append(exprs["alert "+name], rule.Expr)
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s: no alert rules found", alertsFile)
	}
	return exprs, alerts
}

// references extracts the metrics of every expression, failing for an
// expression that names none (it would check nothing), and for fewer
// than min distinct names in the file.
func references(t *testing.T, file string, exprs map[string][]string, min int) []metricRef {
	t.Helper()
	var refs []metricRef
	distinct := map[string]bool{}
	for where, list := range exprs {
		for _, e := range list {
			found := promqlMetrics(e, where)
			if len(found) == 0 {
				t.Errorf("%s: %s: expression names no idgen_/process_/go_ metric, nothing to check: %s", file, where, e)
			}
			for _, r := range found {
				distinct[r.name] = true
			}
			refs = append(refs, found...)
		}
	}
	if len(distinct) < min {
		t.Errorf("%s: found only %d distinct metric names (want at least %d; is the extraction broken?): %v",
			file, len(distinct), min, sortedKeys(distinct))
	}
	t.Logf("%s: %d expressions, %d distinct metrics", file, countExprs(exprs), len(distinct))
	return refs
}

func countExprs(exprs map[string][]string) int {
	n := 0
	for _, l := range exprs {
		n += len(l)
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// panelsOf flattens the dashboard's panels, rows' nested panels included.
func panelsOf(dash map[string]any) []map[string]any {
	var out []map[string]any
	var add func(list any)
	add = func(list any) {
		l, _ := list.([]any)
		for _, p := range l {
			pm, ok := p.(map[string]any)
			if !ok {
				continue
			}
			out = append(out, pm)
			add(pm["panels"])
		}
	}
	add(dash["panels"])
	return out
}

// isDatasourceVar reports whether v names the ${datasource} variable.
func isDatasourceVar(v any) bool {
	switch d := v.(type) {
	case string:
		return d == "${datasource}" || d == "$datasource"
	case map[string]any:
		uid, _ := d["uid"].(string)
		return uid == "${datasource}" || uid == "$datasource"
	}
	return false
}

// num returns v as a JSON number, -1 when it is not one.
func num(v any) float64 {
	if f, ok := v.(float64); ok {
		return f
	}
	return -1
}

// runbookAnchors returns the GitHub anchors of docs/runbook.md's headings.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(raw), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")] = true
		}
	}
	return out
}

// TestDashboardStructure checks deploy/grafana/idgen.json without a node:
// valid JSON that imports on any Grafana (a ${datasource} variable, no
// datasource UID of one installation), instance and cluster variables,
// panels with titles, descriptions, the datasource variable, unique ids
// and targets; alert names and runbook links in the descriptions exist.
func TestDashboardStructure(t *testing.T) {
	dash := loadDashboard(t)
	if v, _ := dash["schemaVersion"].(float64); v < 36 {
		t.Errorf("schemaVersion %v, want 36 or later (Grafana 9+)", dash["schemaVersion"])
	}
	if title, _ := dash["title"].(string); title == "" {
		t.Error("the dashboard has no title")
	}
	tmpl, _ := dash["templating"].(map[string]any)
	list, _ := tmpl["list"].([]any)
	vars := map[string]map[string]any{}
	for _, v := range list {
		vm, _ := v.(map[string]any)
		name, _ := vm["name"].(string)
		vars[name] = vm
	}
	if ds := vars["datasource"]; ds == nil || ds["type"] != "datasource" || ds["query"] != "prometheus" {
		t.Errorf("no datasource variable of type prometheus: %v", ds)
	}
	for _, name := range []string{"instance", "cluster"} {
		v := vars[name]
		if v == nil || v["type"] != "query" || !isDatasourceVar(v["datasource"]) {
			t.Errorf("no query variable $%s on ${datasource}: %v", name, v)
		}
	}
	// Every datasource reference in the file is the variable (or
	// Grafana's built-in annotation source): no installation's UID.
	var walkDS func(v any, path string)
	walkDS = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			for k, child := range x {
				if k == "datasource" {
					builtin := false
					if m, ok := child.(map[string]any); ok && m["uid"] == "-- Grafana --" && strings.HasPrefix(path, ".annotations") {
						builtin = true
					}
					if !isDatasourceVar(child) && !builtin {
						t.Errorf("%s.datasource = %v: use ${datasource}, not a fixed datasource", path, child)
					}
					continue
				}
				walkDS(child, path+"."+k)
			}
		case []any:
			for i, child := range x {
				walkDS(child, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walkDS(dash, "")

	_, alerts := loadAlerts(t)
	anchors := runbookAnchors(t)
	alertRef := regexp.MustCompile(`\bIdgen[A-Z][A-Za-z0-9]*`)
	runbookRef := regexp.MustCompile(`docs/runbook\.md#([a-z0-9_-]+)`)
	ids := map[float64]string{}
	panels := panelsOf(dash)
	if len(panels) < 20 {
		t.Fatalf("only %d panels", len(panels))
	}
	referenced := map[string]bool{}
	for i, p := range panels {
		title, _ := p["title"].(string)
		what := fmt.Sprintf("panel %d %q", i, title)
		if strings.TrimSpace(title) == "" {
			t.Errorf("%s has no title", what)
		}
		id, ok := p["id"].(float64)
		if !ok || id <= 0 {
			t.Errorf("%s has no positive id: %v", what, p["id"])
		} else if other, dup := ids[id]; dup {
			t.Errorf("%s: id %v already used by %s", what, id, other)
		} else {
			ids[id] = what
		}
		if gp, _ := p["gridPos"].(map[string]any); gp == nil {
			t.Errorf("%s has no gridPos", what)
		} else if x, w := num(gp["x"]), num(gp["w"]); w < 1 || x < 0 || x+w > 24 {
			t.Errorf("%s: gridPos %v outside the 24 columns", what, gp)
		}
		if p["type"] == "row" {
			continue
		}
		if !isDatasourceVar(p["datasource"]) {
			t.Errorf("%s: datasource %v, want the ${datasource} variable", what, p["datasource"])
		}
		desc, _ := p["description"].(string)
		if len(desc) < 40 {
			t.Errorf("%s: description %q does not say what to look for", what, desc)
		}
		for _, a := range alertRef.FindAllString(desc, -1) {
			referenced[a] = true
			if !alerts[a] {
				t.Errorf("%s: description names alert %s, not in %s", what, a, alertsFile)
			}
		}
		for _, m := range runbookRef.FindAllStringSubmatch(desc, -1) {
			if !anchors[m[1]] {
				t.Errorf("%s: description links docs/runbook.md#%s, no such section", what, m[1])
			}
		}
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("%s has no targets", what)
		}
		refIDs := map[string]bool{}
		for _, tg := range targets {
			tm, _ := tg.(map[string]any)
			if e, _ := tm["expr"].(string); strings.TrimSpace(e) == "" {
				t.Errorf("%s: a target without expr: %v", what, tm)
			}
			if ds, ok := tm["datasource"]; ok && !isDatasourceVar(ds) {
				t.Errorf("%s: target datasource %v, want ${datasource}", what, ds)
			}
			ref, _ := tm["refId"].(string)
			if ref == "" || refIDs[ref] {
				t.Errorf("%s: refId %q missing or repeated", what, ref)
			}
			refIDs[ref] = true
		}
	}
	// Each alert has a panel that shows what it fires on.
	for a := range alerts {
		if !referenced[a] {
			t.Errorf("no panel description names alert %s", a)
		}
	}
}

// dashboardRequired are metrics the dashboard must query: each replaced a
// stand-in (answers by code, request latency, a mean of counters) that
// showed the event only indirectly.
var dashboardRequired = []string{
	"idgen_clock_jump_rejections_total",
	"idgen_worker_heartbeat_age_seconds",
	"idgen_segment_waits_total",
	"idgen_segment_wait_seconds_bucket",
	"idgen_ordered_persist_duration_seconds_bucket",
}

// TestDashboardShowsRequiredMetrics: the dashboard's panels query every
// metric of dashboardRequired.
func TestDashboardShowsRequiredMetrics(t *testing.T) {
	exprs, _ := dashboardExprs(t, loadDashboard(t))
	used := map[string]bool{}
	for where, list := range exprs {
		for _, e := range list {
			for _, r := range promqlMetrics(e, where) {
				used[r.name] = true
			}
		}
	}
	for _, name := range dashboardRequired {
		if !used[name] {
			t.Errorf("%s: no panel queries %s", dashboardFile, name)
		}
	}
}

// exportedSeries is what the node's /metrics holds, by the name PromQL
// uses (a histogram's _bucket, _sum and _count; a summary's own name,
// _sum and _count): the label sets of its series.
type exportedSeries map[string][]map[string]string

func parseExposition(t *testing.T, body string) exportedSeries {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := exportedSeries{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			var names []string
			switch f.GetType().String() {
			case "HISTOGRAM", "GAUGE_HISTOGRAM":
				names = []string{name + "_bucket", name + "_sum", name + "_count"}
			case "SUMMARY":
				names = []string{name, name + "_sum", name + "_count"}
			default:
				names = []string{name}
			}
			for _, n := range names {
				out[n] = append(out[n], labels)
			}
		}
	}
	return out
}

// missing returns why ref is not satisfied by the scrape ("" when it is):
// the name is not exported, or a label value it selects has no series.
func (e exportedSeries) missing(ref metricRef) string {
	series, ok := e[ref.name]
	if !ok {
		return "not exported by the node"
	}
	var problems []string
	for _, m := range ref.matchers {
		if targetLabels[m.label] || strings.Contains(m.value, "$") || m.value == "" {
			continue
		}
		var values []string
		switch {
		case m.op == "=":
			values = []string{m.value}
		case m.op == "=~" && literalAlternatives.MatchString(m.value):
			values = strings.Split(m.value, "|")
		default:
			continue // negative or a real regex: nothing to look up
		}
		for _, v := range values {
			found := false
			have := map[string]bool{}
			for _, s := range series {
				have[s[m.label]] = true
				if s[m.label] == v {
					found = true
				}
			}
			if !found {
				problems = append(problems, fmt.Sprintf("no series with %s=%q (values exported: %v)", m.label, v, sortedKeys(have)))
			}
		}
	}
	return strings.Join(problems, "; ")
}

// TestDashboardMetricsExported starts a node with ZooKeeper and MySQL (the
// mode that exports every metric), calls every channel, and checks that
// each metric the Grafana dashboard and the alert rules name, and each
// label value they select, is on its /metrics.
func TestDashboardMetricsExported(t *testing.T) {
	dash := loadDashboard(t)
	dashExprs, targets := dashboardExprs(t, dash)
	if targets < 40 {
		t.Errorf("%s: only %d expr fields found", dashboardFile, targets)
	}
	refs := references(t, dashboardFile, dashExprs, minDashboardMetrics)
	alertExprs, _ := loadAlerts(t)
	refs = append(refs, references(t, alertsFile, alertExprs, minAlertMetrics)...)
	if t.Failed() {
		t.FailNow()
	}

	zkAddr, dsn := clusterEnv(t) // skips without ./build.sh test's servers
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{
		"--zk", zkAddr, "--cluster", fmt.Sprintf("dash%d", rand.Uint32()), "--mysql", dsn,
		"--zk-session-timeout", "3s", "--heartbeat-interval", "500ms", "--advertise-host", "127.0.0.1",
		"--auto-create-biz", "true", "--properties-dir", t.TempDir()}})
	n.WaitSnowflake(t, 30*time.Second)
	dashboardTraffic(t, n)

	// Scrape until every reference is satisfied (the clock offset needs a
	// heartbeat, the ORDERED owners their first rounds) or time is up.
	var problems []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := n.Get(context.Background(), "/metrics")
		if err != nil || code != 200 {
			t.Fatalf("/metrics: %d %v", code, err)
		}
		problems = checkRefs(t, parseExposition(t, body), refs)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// checkRefs returns one line per reference the scrape does not satisfy
// (grouped by metric and problem), and per stale allow-list entry.
func checkRefs(t *testing.T, exp exportedSeries, refs []metricRef) []string {
	t.Helper()
	byProblem := map[string]map[string]bool{} // "metric: problem" -> where
	used := map[string]bool{}
	for _, r := range refs {
		used[r.name] = true
		why := exp.missing(r)
		if why == "" {
			continue
		}
		if _, ok := dashboardAllowMissing[r.name]; ok {
			continue
		}
		file := dashboardFile
		if strings.HasPrefix(r.where, "alert ") {
			file = alertsFile
		}
		key := fmt.Sprintf("%s: %s", r.name, why)
		if byProblem[key] == nil {
			byProblem[key] = map[string]bool{}
		}
		byProblem[key][file+" ("+r.where+")"] = true
	}
	var out []string
	for _, key := range sortedKeys(byProblem) {
		out = append(out, fmt.Sprintf("%s; used by %s", key, strings.Join(sortedKeys(byProblem[key]), ", ")))
	}
	for name, reason := range dashboardAllowMissing {
		if !used[name] {
			out = append(out, fmt.Sprintf("allow-list entry %s (%s) is not referenced any more: remove it", name, reason))
		} else if _, ok := exp[name]; ok {
			out = append(out, fmt.Sprintf("allow-list entry %s (%s) is exported now: remove it", name, reason))
		}
	}
	return out
}

// dashboardTraffic makes a few calls on each channel and the events the
// panels show: a rate-limit refusal, an auth failure, the other RPCs.
func dashboardTraffic(t *testing.T, n *testnode.Node) {
	t.Helper()
	c := n.Client(t)
	ctx := context.Background()
	for _, channel := range []*idl.Channel{ch(idl.Channel_SNOWFLAKE), ch(idl.Channel_UNORDERED), ch(idl.Channel_ORDERED), nil} {
		for i := range 3 {
			req := &idl.NextIDsRequest{Biz: "dash", Channel: channel, Count: int32(1 + i)}
			if channel != nil {
				req.Biz = bizFor("dash", *channel)
			}
			if channel != nil && *channel == idl.Channel_ORDERED {
				req.SubKey = str("k")
			}
			nextIDsRetrying(t, c, req)
		}
	}
	quota, burst := int64(100), int64(1000)
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "dashq", IdQuota: &quota, IdBurst: &burst}); err != nil {
		t.Fatal(err)
	}
	nextIDsRetrying(t, c, &idl.NextIDsRequest{Biz: "dashq", Count: 1000})
	var ie *idl.IdgenError
	if _, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "dashq", Count: 1000}); !errors.As(err, &ie) || ie.Code != idl.ErrorCode_RATE_LIMITED {
		t.Fatalf("over the ID quota: %v, want RATE_LIMITED", err)
	}
	if _, err := c.ParseID(ctx, &idl.ParseIDRequest{Id: 1 << 40}); err != nil {
		t.Fatalf("ParseID: %v", err)
	}
	if _, err := c.Clock(ctx, &idl.ClockRequest{}); err != nil {
		t.Fatalf("Clock: %v", err)
	}
	if _, err := c.ListWorkers(ctx, &idl.ListWorkersRequest{}); err != nil {
		t.Fatalf("ListWorkers: %v", err)
	}
	if _, err := n.BareClient(t).ListBiz(ctx, &idl.ListBizRequest{}); err == nil {
		t.Fatal("ListBiz without the admin token was answered")
	}
}
