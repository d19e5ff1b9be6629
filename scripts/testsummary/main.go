// Command testsummary reads `go test -json` on stdin for ./build.sh test: it
// keeps every event in the -log file, prints one line per package and the
// output of failing tests only, and writes "PASSED FAILED SKIPPED" and then
// the failing package/test names to the -result file.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string
	FailedBuild string
}

type pkgState struct {
	out                     []string
	tests                   map[string][]string // running tests' output
	order                   []string
	passed, failed, skipped int
}

const maxLines = 300

func main() {
	logPath := flag.String("log", "", "full log (appended)")
	resPath := flag.String("result", "", "result file")
	flag.Parse()
	logf, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer logf.Close()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()

	pkgs := map[string]*pkgState{}
	builds := map[string][]string{}
	var passed, failed, skipped int
	var failures []string
	get := func(p string) *pkgState {
		s := pkgs[p]
		if s == nil {
			s = &pkgState{tests: map[string][]string{}}
			pkgs[p] = s
		}
		return s
	}
	show := func(title string, lines []string) {
		fmt.Fprintf(out, "\n--- %s\n", title)
		if len(lines) > maxLines {
			fmt.Fprintf(out, "    (%d earlier lines in the full log)\n", len(lines)-maxLines)
			lines = lines[len(lines)-maxLines:]
		}
		for _, l := range lines {
			out.WriteString(l)
		}
		out.WriteString("\n")
		out.Flush()
	}

	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		var ev event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &ev) != nil || ev.Action == "" {
			fmt.Fprintln(logf, line) // not an event: go's own messages
			fmt.Fprintln(out, line)
			out.Flush()
			continue
		}
		switch ev.Action {
		case "build-output":
			logf.WriteString(ev.Output)
			builds[ev.ImportPath] = append(builds[ev.ImportPath], ev.Output)
			continue
		case "output":
			logf.WriteString(ev.Output)
		}
		s := get(ev.Package)
		if ev.Test != "" {
			switch ev.Action {
			case "run":
				if _, ok := s.tests[ev.Test]; !ok {
					s.order = append(s.order, ev.Test)
				}
				s.tests[ev.Test] = s.tests[ev.Test][:0:0]
			case "output":
				s.tests[ev.Test] = append(s.tests[ev.Test], ev.Output)
			case "pass":
				passed++
				s.passed++
				delete(s.tests, ev.Test)
			case "skip":
				skipped++
				s.skipped++
				delete(s.tests, ev.Test)
			case "fail":
				failed++
				s.failed++
				failures = append(failures, ev.Package+" "+ev.Test)
				show(fmt.Sprintf("FAIL %s %s (%.2fs)", ev.Package, ev.Test, ev.Elapsed), s.tests[ev.Test])
				delete(s.tests, ev.Test)
			}
			continue
		}
		switch ev.Action {
		case "output":
			s.out = append(s.out, ev.Output)
		case "pass", "skip":
			if ev.Action == "pass" || s.passed+s.skipped > 0 {
				fmt.Fprintf(out, "ok    %-48s %7.1fs  %s\n", ev.Package, ev.Elapsed, counts(s))
				out.Flush()
			}
			delete(pkgs, ev.Package)
		case "fail":
			// Tests still running when the package failed (a panic, a
			// timeout, os.Exit) never report: they failed.

			for _, t := range s.order {
				if lines, ok := s.tests[t]; ok {

					failed++
					s.failed++
					failures = append(failures, ev.Package+" "+t+" (did not finish)")
					show(fmt.Sprintf("FAIL %s %s (did not finish)", ev.Package, t), lines)
				}
			}

			lines := s.out
			if ev.FailedBuild != "" {
				lines = append(append([]string{}, builds[ev.FailedBuild]...), lines...)
			}
			if s.failed == 0 || ev.FailedBuild != "" {
				failed++
				what := "package failed"
				if ev.FailedBuild != "" {
					what = "build failed"
				}
				failures = append(failures, ev.Package+" ("+what+")")
				show(fmt.Sprintf("FAIL %s (%s)", ev.Package, what), lines)
			} else if len(lines) > 0 && !onlyFailLines(lines) {
				show(fmt.Sprintf("FAIL %s (package output)", ev.Package), lines)
			}
			fmt.Fprintf(out, "FAIL  %-48s %7.1fs  %s\n", ev.Package, ev.Elapsed, counts(s))
			out.Flush()
			delete(pkgs, ev.Package)
		}
	}
	// Input ended with packages unfinished: go test was killed.
	var left []string
	for p := range pkgs {
		left = append(left, p)
	}
	sort.Strings(left)
	for _, p := range left {
		s := pkgs[p]
		for _, t := range s.order {
			if lines, ok := s.tests[t]; ok {
				failed++
				failures = append(failures, p+" "+t+" (did not finish)")
				show(fmt.Sprintf("FAIL %s %s (did not finish)", p, t), lines)
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary:", err)
	}
	res := fmt.Sprintf("%d %d %d\n", passed, failed, skipped)
	for _, f := range failures {
		res += f + "\n"
	}
	if err := os.WriteFile(*resPath, []byte(res), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func counts(s *pkgState) string {
	parts := []string{fmt.Sprintf("%d passed", s.passed)}
	if s.failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", s.failed))
	}
	if s.skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped", s.skipped))
	}
	return strings.Join(parts, ", ")
}

// onlyFailLines reports whether a failed package's own output is just the
// closing FAIL lines go test prints after failing tests.
func onlyFailLines(lines []string) bool {
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l != "FAIL" && !strings.HasPrefix(l, "FAIL\t") && !strings.HasPrefix(l, "exit status ") {
			return false
		}
	}
	return true
}
