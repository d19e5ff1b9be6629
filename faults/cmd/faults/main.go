// Command faults runs idgen's fault-injection suite: real idgen nodes on a
// real ZooKeeper and MariaDB, faults injected under load, every answer
// recorded and judged by an independent checker. Run it through
// `./build.sh faults [SCENARIO...]`, which builds the binaries and starts
// (and always stops) the servers.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idgen/idgen/faults/harness"
	"github.com/idgen/idgen/faults/scenario"
)

func main() {
	seed := flag.Uint64("seed", 0, "seed of the load and of the soak's fault schedule (0: from the time; printed)")
	soak := flag.Duration("soak", 5*time.Minute, "length of the soak scenario")
	work := flag.String("work", "", "directory for node logs and histories (default: output/faults/<time>)")
	bin := flag.String("bin", "", "idgen binary")
	binFI := flag.String("bin-faultinject", "", "idgen binary built with -tags faultinject")
	idctl := flag.String("idctl", "", "idctl binary")
	results := flag.String("results", "", "also write the results as a Markdown table to this file")
	list := flag.Bool("list", false, "list the scenarios and exit")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: faults [flags] [SCENARIO...]   (default: every scenario, the negative controls included)\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	all := scenario.All()
	if *list {
		for _, s := range all {
			fmt.Printf("%-22s %s\n", s.Name, s.What)
		}
		return
	}
	var run []scenario.Scenario
	if flag.NArg() == 0 {
		run = all
	} else {
		byName := map[string]scenario.Scenario{}
		for _, s := range all {
			byName[s.Name] = s
		}
		for _, a := range flag.Args() {
			s, ok := byName[a]
			if !ok {
				fmt.Fprintf(os.Stderr, "faults: unknown scenario %q (faults -list)\n", a)
				os.Exit(2)
			}
			run = append(run, s)
		}
	}
	if *bin == "" || *binFI == "" || *idctl == "" {
		fmt.Fprintln(os.Stderr, "faults: -bin, -bin-faultinject and -idctl are required (./build.sh faults passes them)")
		os.Exit(2)
	}
	servers, err := harness.ServersFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano() % 1000000)
	}
	if *work == "" {
		*work = filepath.Join("output", "faults", time.Now().UTC().Format("20060102T150405"))
	}
	if err := os.MkdirAll(*work, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(2)
	}
	harness.PidDir = os.Getenv("IDGEN_FAULTS_PIDDIR")
	env := &scenario.Env{Servers: servers, Bin: *bin, BinFI: *binFI, Idctl: *idctl, WorkDir: *work, Seed: *seed, Soak: *soak, Out: os.Stdout}
	fmt.Printf("faults: %d scenarios, seed %d, soak %v, logs in %s\n", len(run), *seed, *soak, *work)
	t0 := time.Now()
	var res []*scenario.Result
	bad := 0
	for i, s := range run {
		r := scenario.Execute(env, s, *seed+uint64(i))
		res = append(res, r)
		if !r.OK {
			bad++
		}
	}
	fmt.Println()
	fmt.Println("faults: summary")
	for _, r := range res {
		fmt.Println(r.Line())
	}
	took := time.Since(t0).Round(time.Second)
	fmt.Printf("faults: %d scenarios in %v, seed %d: %d as expected, %d not\n", len(res), took, *seed, len(res)-bad, bad)
	if *results != "" {
		if err := os.WriteFile(*results, []byte(table(res, *seed, took)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
		}
	}
	if bad > 0 {
		os.Exit(1)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// table renders the results as Markdown.
func table(res []*scenario.Result, seed uint64, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s, seed %d, %v in all.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), seed, took)
	b.WriteString("| scenario | verdict | IDs checked | calls | duplicates | order violations | (worker, ms) by two incarnations | bad refusals | refusals by code | no answer | longest gap: cluster | SNOWFLAKE (with fallback) | SNOWFLAKE (no fallback) | UNORDERED | ORDERED | SNOWFLAKE refusals, business without fallback | longest SNOWFLAKE gap per node (no fallback) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range res {
		rep := r.Report
		if rep == nil {
			fmt.Fprintf(&b, "| %s | %s | | | | | | | | | | | | | | | |\n", r.Name, r.Verdict)
			continue
		}
		nf := "" // no business without fallback in this scenario
		if r.NFBiz != "" {
			nf = strconv.Itoa(r.NFRefused())
		}
		var codes []string
		for k, v := range rep.ErrorsByCode {
			codes = append(codes, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(codes)
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", r.Name, r.Verdict, rep.IDs, rep.Calls,
			rep.Duplicates, rep.Order, rep.WorkerMs, rep.BadRefusals, strings.Join(codes, ", "), rep.Transport,
			ms(rep.Gap("cluster").Len), ms(rep.Gap("channel/SNOWFLAKE").Len), ms(rep.Gap("channel/SNOWFLAKE-no-fallback").Len),
			ms(rep.Gap("channel/UNORDERED").Len), ms(rep.Gap("channel/ORDERED").Len), nf, r.NodeGapsText())
	}
	return b.String()
}
