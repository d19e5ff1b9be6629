package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/client"
	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
)

// TestIntegration_ClusterFailover: the client finds three real nodes in
// ZooKeeper; one is SIGKILLed under load and the callers see no error and
// no duplicate; a fourth node joins and takes calls.
func TestIntegration_ClusterFailover(t *testing.T) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB), or source .testenv")
	}
	dsn := testdb.New(t, base)
	cluster := fmt.Sprintf("client%d", rand.Uint32())
	start := func() *testnode.Node {
		n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{
			"--zk", zkAddr, "--cluster", cluster, "--mysql", dsn, "--zk-session-timeout", "3s",
			"--heartbeat-interval", "500ms", "--advertise-host", "127.0.0.1",
			"--auto-create-biz", "true", "--properties-dir", t.TempDir()}})
		n.WaitSnowflake(t, 60*time.Second)
		return n
	}
	nodes := []*testnode.Node{start(), start(), start()}

	c, err := client.New(client.Config{ZK: strings.Split(zkAddr, ","), Cluster: cluster, CallTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testnode.WaitFor(t, 30*time.Second, "the client to list 3 nodes", func() bool { return len(c.Addrs()) == 3 })

	// Load: 8 callers on UNORDERED and SNOWFLAKE, every ID kept.
	var (
		mu     sync.Mutex
		seen   = map[int64]string{}
		errs   []error
		served atomic.Int64
		stop   atomic.Bool
		wg     sync.WaitGroup
	)
	var lat []time.Duration // per call, under mu
	for w := 0; w < 16; w++ {
		ch := client.Unordered
		if w%2 == 1 {
			ch = client.Snowflake
		}
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Now()
				id, err := c.Next(context.Background(), "cl", client.WithChannel(ch))
				took := time.Since(t0)
				mu.Lock()
				lat = append(lat, took)
				if err != nil {
					errs = append(errs, err)
				} else if prev, dup := seen[id]; dup {
					// SNOWFLAKE and UNORDERED numbers of one business are
					// disjoint by design (the floor): any repeat is a duplicate.
					errs = append(errs, fmt.Errorf("duplicate %d on %v, first seen on %s", id, ch, prev))
				} else {
					seen[id] = ch.String()
				}
				mu.Unlock()
				served.Add(1)
			}
		})
	}
	waitServed := func(n int64, what string) {
		target := served.Load() + n
		testnode.WaitFor(t, 60*time.Second, what, func() bool { return served.Load() >= target })
	}
	waitServed(500, "load before the kill")
	mu.Lock()
	killAt := len(lat)
	mu.Unlock()
	nodes[0].Kill()
	waitServed(2000, "load after the kill")
	nodes[0].Restart(t) // the killed node comes back (a crash restart: another slot)
	waitServed(2000, "load after the restart")
	mu.Lock()
	fault := slices.Clone(lat[killAt:])
	mu.Unlock()
	slices.Sort(fault)
	t.Logf("from the kill to after the restart: %d calls, p99 %v, p99.9 %v, max %v (figures, not asserted)", len(fault),
		fault[len(fault)*99/100], fault[len(fault)*999/1000], fault[len(fault)-1])

	// A fourth node joins: the client lists it and it serves calls.
	n4 := start()
	testnode.WaitFor(t, 30*time.Second, "the client to list the new node", func() bool {
		for _, a := range c.Addrs() {
			if a == n4.RPCAddr {
				return true
			}
		}
		return false
	})
	// It serves once it is listed and done starting (a starting node's
	// refusals back the client off it for a moment): wait for that under
	// load rather than for a number of calls, which a busy machine may
	// finish first.
	before := rpcCount(t, n4, `code="OK"`)
	testnode.WaitFor(t, 30*time.Second, "the new node to answer calls with IDs", func() bool { return rpcCount(t, n4, `code="OK"`) > before+10 })
	waitServed(2000, "load after the join")
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("%d caller-visible errors, first: %v", len(errs), errs[0])
	}
	t.Logf("%d IDs, no error, no duplicate", len(seen))
}

// rpcCount reads the node's NextIDs call count from /metrics.
// rpcCount sums the node's NextIDs calls whose metric line contains code
// ("" for every code).
func rpcCount(t *testing.T, n *testnode.Node, code string) float64 {
	t.Helper()
	_, body, err := n.Get(context.Background(), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") || !strings.Contains(line, `method="NextIDs"`) || !strings.Contains(line, "_total") || !strings.Contains(line, code) {
			continue
		}
		var v float64
		f := strings.Fields(line)
		if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
			total += v
		}
	}
	return total
}
