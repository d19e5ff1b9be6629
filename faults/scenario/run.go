package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
}

// Line is the scenario's one summary line.
func (res *Result) Line() string {
	s := fmt.Sprintf("faults: %-20s %-20s %6s", res.Name, res.Verdict, res.Took.Round(time.Second))
	if res.Report != nil {
		s += " " + res.Report.Summary()
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
	}
	failed := res.Report != nil && res.Report.Failed()
	switch {
	case sc.Negative && res.Report != nil && res.Report.Duplicates > 0:
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
	if failed || sc.Negative {
		path := filepath.Join(e.WorkDir, sc.Name+".history.jsonl")
		if werr := writeHistory(path, r.calls); werr == nil {
			res.Notes = append(res.Notes, "history "+path)
		}
	}
	fmt.Fprintln(e.Out, res.Line())
	if failed {
		fmt.Fprint(e.Out, res.Report.Details())
	}
	return res
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
