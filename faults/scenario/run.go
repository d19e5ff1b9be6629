package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/idgen/idgen/faults/checker"
)

func bg() context.Context { return context.Background() }

func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Scenario is one named fault scenario.
type Scenario struct {
	Name     string
	What     string // what it does and what it checks
	Negative bool   // a control: must produce duplicates
	Run      func(r *Run) error
}

// Result is a scenario's outcome.
type Result struct {
	Name     string
	Negative bool
	Verdict  string // PASS, FAIL, ERROR, EXPECTED-FAIL, CONTROL-DID-NOT-FAIL
	OK       bool   // the suite may pass with this result
	Report   *checker.Report
	Err      error
	Took     time.Duration
	Notes    []string
	// NFBiz is the business without fallback ("" when the scenario had
	// none); NFRefusals counts its SNOWFLAKE refusals by code.
	NFBiz      string
	NFRefusals map[string]int
	// NodeGaps: per node, the longest time without a SNOWFLAKE ID served
	// by the snowflake generator itself (fallback answers do not count).
	NodeGaps []checker.Gap
}

// NFRefused returns the number of SNOWFLAKE refusals on the business
// without fallback.
func (res *Result) NFRefused() int {
	n := 0
	for _, v := range res.NFRefusals {
		n += v
	}
	return n
}

// NodeGapsText renders NodeGaps as "n0 0.05 s, n1 0.06 s".
func (res *Result) NodeGapsText() string {
	var parts []string
	for _, g := range res.NodeGaps {
		parts = append(parts, fmt.Sprintf("%s %.2f s", strings.TrimPrefix(g.Key, "node/"), g.Len.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// Line is the scenario's one summary line.
func (res *Result) Line() string {
	s := fmt.Sprintf("faults: %-20s %-20s %6s", res.Name, res.Verdict, res.Took.Round(time.Second))
	if res.Report != nil {
		s += " " + res.Report.Summary()
		if res.NFBiz != "" {
			s += fmt.Sprintf(" SF refused (%s, no fallback)=%d", res.NFBiz, res.NFRefused())
		}
		s += " SF gap per node: " + res.NodeGapsText()
	}
	if res.Err != nil {
		s += " error: " + strings.ReplaceAll(res.Err.Error(), "\n", " | ")
	}
	if len(res.Notes) > 0 {
		s += " [" + strings.Join(res.Notes, "; ") + "]"
	}
	return s
}

// Execute runs one scenario, checks its history and prints its summary line
// (and, on a violation, the exact ranges, nodes and times).
func Execute(e *Env, sc Scenario, seed uint64) *Result {
	r := &Run{Env: e, Name: sc.Name, Negative: sc.Negative, seed: seed}
	t0 := time.Now()
	fmt.Fprintf(e.Out, "==> %s: %s\n", sc.Name, sc.What)
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return sc.Run(r)
	}()
	r.cleanup()
	res := &Result{Name: sc.Name, Negative: sc.Negative, Err: err, Took: time.Since(t0), Notes: r.notes}
	if len(r.calls) > 0 {
		res.Report = checker.Check(r.calls, checker.Options{Layout: checker.DefaultLayout, From: r.from, To: r.to})
		res.NodeGaps = snowflakeNodeGaps(r.calls, r.to)
		if r.cluster != nil && r.cluster.NFBiz != "" {
			res.NFBiz, res.NFRefusals = r.cluster.NFBiz, map[string]int{}
			for i := range r.calls {
				if c := &r.calls[i]; c.Biz == res.NFBiz && c.Err != nil {
					res.NFRefusals[checker.CodeName(c.Err.Code)]++
				}
			}
		}
	}
	// A scenario may find violations of its own (Run.Violation: a
	// gapless key with a hole no failed call explains).
	failed := res.Report != nil && res.Report.Failed() || len(r.violations) > 0
	switch {
	case sc.Negative && res.Report != nil && (res.Report.Duplicates > 0 || res.Report.WorkerMs > 0 || r.negOrder && res.Report.Order > 0 ||
		r.negViolation && len(r.violations) > 0):
		res.Verdict, res.OK = "EXPECTED-FAIL", true
	case sc.Negative && err == nil:
		res.Verdict = "CONTROL-DID-NOT-FAIL"
	case failed:
		res.Verdict = "FAIL"
	case err != nil:
		res.Verdict = "ERROR"
	case res.Report == nil || res.Report.OK == 0:
		res.Verdict, res.Err = "ERROR", fmt.Errorf("no successful call recorded")
	default:
		res.Verdict, res.OK = "PASS", true
	}
	if failed || sc.Negative || r.keepHistory {
		path := filepath.Join(e.WorkDir, sc.Name+".history.jsonl")
		if werr := writeHistory(path, r.calls); werr == nil {
			res.Notes = append(res.Notes, "history "+path)
		}
	}
	fmt.Fprintln(e.Out, res.Line())
	if failed && res.Report != nil {
		fmt.Fprint(e.Out, res.Report.Details())
	}
	for _, v := range r.violations {
		fmt.Fprintf(e.Out, "  [violation] %s\n", v)
	}
	return res
}

// snowflakeNodeGaps returns, per node, the longest time without a SNOWFLAKE
// ID served by the generator itself (any business; fallback answers and
// refusals do not count), from the node's first call to to. A node's window
// starts at its first call so that a spare started late is not charged with
// the time before it existed; a node down or paused is charged.
func snowflakeNodeGaps(calls []checker.Call, to time.Time) []checker.Gap {
	first := map[string]time.Time{}
	ends := map[string][]time.Time{}
	for i := range calls {
		c := &calls[i]
		if t, ok := first[c.Node]; !ok || c.Start.Before(t) {
			first[c.Node] = c.Start
		}
		if c.End.After(to) {
			to = c.End
		}
		if c.OK() && c.Channel == checker.Snowflake && c.Served == checker.Snowflake && !c.Fallback {
			ends[c.Node] = append(ends[c.Node], c.End)
		}
	}
	nodes := make([]string, 0, len(first))
	for n := range first {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var gaps []checker.Gap
	for _, n := range nodes {
		gaps = append(gaps, checker.LongestGap("node/"+n, ends[n], first[n], to))
	}
	return gaps
}

func writeHistory(path string, calls []checker.Call) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range calls {
		if err := enc.Encode(&calls[i]); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
