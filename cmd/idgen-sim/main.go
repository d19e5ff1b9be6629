// Command idgen-sim runs the cluster simulator (package sim): seeds of
// drawn fault schedules against in-process nodes running the real code.
//
//	idgen-sim [--seed N | --seeds K [--first N]] [--budget DURATION] [--control NAME]
//	          [--parallel P] [--nodes 3] [--duration 3s] [--repeat R] [-v]
//
// Every failing seed prints its fault schedule and findings; --seed N
// replays one (--repeat runs it R times: interleavings vary between runs).
// The exit status is 1 when a seed failed (with --expect-violation: when
// none found a safety violation, the negative controls' success).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/sim"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		seed     = flag.Uint64("seed", 0, "run this one seed (replay)")
		seeds    = flag.Int("seeds", 0, "run this many seeds, from --first")
		first    = flag.Uint64("first", 0, "first seed of --seeds (default: from the clock, printed)")
		budget   = flag.Duration("budget", 0, "run seeds until this much time has passed (with --seeds: whichever ends first)")
		control  = flag.String("control", "", "a negative control: an IDGEN_FAULT_* switch of sim.Controls (or mix:KIND,...)")
		parallel = flag.Int("parallel", 2, "seeds run at once")
		nodes    = flag.Int("nodes", 3, "nodes per cluster")
		duration = flag.Duration("duration", 3*time.Second, "how long faults are drawn per seed")
		repeat   = flag.Int("repeat", 1, "runs of each seed")
		expect   = flag.Bool("expect-violation", false, "succeed only if some seed fails (a negative control)")
		verbose  = flag.Bool("v", false, "print every seed, and the nodes' logs at info level")
		list     = flag.Bool("list", false, "list the negative controls and exit")
	)
	flag.Parse()
	if *list {
		for _, c := range sim.Controls {
			fmt.Printf("--control %-36s %s (mix %v)\n", c.Switch, c.Hole, c.Mix)
		}
		for _, h := range sim.Holes {
			fmt.Printf("--control hole:%-31s %s (mix %v)\n", h.Name, h.Hole, h.Mix)
		}
		return 0
	}
	for _, c := range sim.Controls {
		if c.Switch == *control {
			// Switches that the packages read from the environment take
			// effect in-process (the binary is built with -tags faultinject).
			_ = os.Setenv(c.Switch, "1")
		}
	}
	log := zap.NewNop()
	if *verbose {
		log, _ = zap.NewDevelopment()
	}
	o := sim.Options{Nodes: *nodes, Duration: *duration, Control: *control, Logger: log}
	var todo []uint64
	switch {
	case *seeds > 0 || *budget > 0:
		if *first == 0 {
			*first = uint64(time.Now().UnixNano() % 1_000_000_000)
		}
		n := *seeds
		if n == 0 {
			n = 1 << 30
		}
		for i := 0; i < n; i++ {
			todo = append(todo, *first+uint64(i))
			if len(todo) > 1_000_000 {
				break
			}
		}
	default:
		todo = []uint64{*seed}
	}
	fmt.Printf("idgen-sim: control=%q nodes=%d duration=%v parallel=%d first seed %d\n", *control, *nodes, *duration, *parallel, todo[0])
	start := time.Now()
	var (
		next, done, failed       atomic.Int64
		unsafe, starved, limited atomic.Int64
		mu                       sync.Mutex
		failures                 []uint64
		wg                       sync.WaitGroup
	)
	for range max(*parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if int(i) >= len(todo) || (*budget > 0 && time.Since(start) > *budget) {
					return
				}
				for range max(*repeat, 1) {
					r := sim.Run(todo[i], o)
					done.Add(1)
					if r.Unsafe() {
						unsafe.Add(1)
					}
					inconclusive := !r.Failed() && r.Overloaded() && (r.Err != nil || len(r.Stuck) > 0)
					if inconclusive {
						starved.Add(1)
					}
					if r.Limit {
						limited.Add(1)
					}
					if r.Failed() {
						failed.Add(1)
						mu.Lock()
						failures = append(failures, r.Seed)
						fmt.Println(r)
						mu.Unlock()
					} else if *verbose || inconclusive || r.Limit {
						fmt.Println(r)
					}
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	fmt.Printf("idgen-sim: %d runs, %d failed (%d unsafe), %d inconclusive (machine overloaded), %d at a documented limit, %v, %.2f seeds/s; failing seeds: %v\n",
		done.Load(), failed.Load(), unsafe.Load(), starved.Load(), limited.Load(),
		took.Round(time.Millisecond), float64(done.Load())/took.Seconds(), failures)
	if *expect {
		// A switch's control must find a safety violation (an
		// availability failure of the same seed proves nothing about the
		// switch); a hole: mix may find either.
		found := unsafe.Load()
		if strings.HasPrefix(*control, "hole:") {
			found = failed.Load()
		}
		if found == 0 {
			fmt.Println("idgen-sim: the control found no violation")
			return 1
		}
		return 0
	}
	if failed.Load() > 0 {
		return 1
	}
	return 0
}
