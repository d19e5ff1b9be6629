package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// clusterEnv returns ZooKeeper and MySQL from ./build.sh test, or skips.
func clusterEnv(t *testing.T) (zkAddr, dsn string) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	return zkAddr, testdb.New(t, base)
}

// startCluster starts n nodes of a fresh cluster on zkAddr and dsn and
// waits until each serves snowflake; worker IDs must be distinct.
func startCluster(t *testing.T, n int, zkAddr, dsn string) ([]*testnode.Node, []idgensvc.Client) {
	cluster := fmt.Sprintf("e2e%d", rand.Uint32())
	nodes := make([]*testnode.Node, n)
	clients := make([]idgensvc.Client, n)
	workers := map[int32]bool{}
	for i := range nodes {
		nodes[i] = testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{
			"--zk", zkAddr, "--cluster", cluster, "--mysql", dsn, "--zk-session-timeout", "3s",
			"--heartbeat-interval", "500ms", "--outage-tolerance", "2s", "--advertise-host", "127.0.0.1",
			"--auto-create-biz", "true", "--properties-dir", t.TempDir()}})
		clients[i] = nodes[i].Client(t)
		nodes[i].WaitSnowflake(t, 30*time.Second)
		r, _ := clients[i].Clock(context.Background(), &idl.ClockRequest{})
		if workers[r.Worker] {
			t.Fatalf("worker %d held by two nodes", r.Worker)
		}
		workers[r.Worker] = true
	}
	return nodes, clients
}

// TestE2E_ClusterKillPauseNoDuplicate: three real nodes on one ZooKeeper and
// one MariaDB get distinct worker IDs; under load one is SIGKILLed and
// restarted and another SIGSTOPped past its session timeout and resumed.
// No ID is issued twice on any channel across all nodes, and every ORDERED
// caller sees strictly increasing numbers.
func TestE2E_ClusterKillPauseNoDuplicate(t *testing.T) {
	zkAddr, dsn := clusterEnv(t)
	nodes, clients := startCluster(t, 3, zkAddr, dsn)
	lw, err := clients[0].ListWorkers(context.Background(), &idl.ListWorkersRequest{})
	if err != nil || len(lw.Workers) != 3 {
		t.Fatalf("ListWorkers = %+v, %v; want 3 workers", lw, err)
	}

	var callers []caller
	for _, c := range clients {
		for _, w := range []idl.Channel{idl.Channel_SNOWFLAKE, idl.Channel_UNORDERED, idl.Channel_ORDERED} {
			callers = append(callers, caller{c: c, biz: "e2e", ch: w, subKey: "key-1"})
		}
	}
	ld := startLoad(t, callers, nil)
	time.Sleep(time.Second)
	nodes[1].Kill() // SIGKILL under load
	time.Sleep(500 * time.Millisecond)
	nodes[1].Restart(t)
	if err := nodes[2].Signal(syscall.SIGSTOP); err != nil { // pause past the session timeout
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := nodes[2].Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testnode.WaitFor(t, 30*time.Second, "paused node serving again", func() bool {
		r, err := clients[2].Clock(context.Background(), &idl.ClockRequest{})
		return err == nil && r.State == "serving"
	})
	time.Sleep(time.Second)
	ld.finish()
	for _, ch := range []string{"SNOWFLAKE", "UNORDERED", "ORDERED"} {
		if ld.count(ch) == 0 {
			t.Errorf("no %s IDs issued", ch)
		}
	}
	t.Logf("unique ids: snowflake %d, unordered %d, ordered %d; errors by code: %v",
		ld.count("SNOWFLAKE"), ld.count("UNORDERED"), ld.count("ORDERED"), ld.errs)
}

// caller is one load goroutine: a node's client, a business and a channel
// (and the sub key on ORDERED).
type caller struct {
	c      idgensvc.Client
	biz    string
	ch     idl.Channel
	subKey string
}

// load drives NextIDs from one goroutine per caller until finish. It
// records every ID per number space and fails the test on a repeat or, on
// ORDERED, on a number not above the caller's previous one. SNOWFLAKE,
// UNORDERED and snowflake fallback IDs of one business share one space (a
// snowflake ID below the floor would collide with a segment number there);
// ORDERED numbers are per (business, sub key).
type load struct {
	mu      sync.Mutex
	seen    map[string]map[int64]bool
	issued  map[string]int // per channel that served ("SNOWFLAKE", "UNORDERED", "ORDERED")
	ordered int            // ORDERED numbers received
	errs    map[string]int // "CHANNEL CODE" -> count
	observe func(ch idl.Channel, err error)
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startLoad starts the callers; observe (may be nil) sees every result,
// called with the load's lock held.
func startLoad(t *testing.T, callers []caller, observe func(ch idl.Channel, err error)) *load {
	l := &load{seen: map[string]map[int64]bool{}, issued: map[string]int{}, errs: map[string]int{}, observe: observe, stop: make(chan struct{})}
	for _, c := range callers {
		l.wg.Add(1)
		go l.run(t, c)
	}
	return l
}

func (l *load) run(t *testing.T, c caller) {
	defer l.wg.Done()
	last := int64(0)
	space := "biz:" + c.biz
	if c.ch == idl.Channel_ORDERED {
		space = "ordered:" + c.biz + "/" + c.subKey
	}
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		req := &idl.NextIDsRequest{Biz: bizFor(c.biz, c.ch), Channel: &c.ch, Count: int32(1 + i%10)}
		if c.ch == idl.Channel_ORDERED {
			req.SubKey = &c.subKey
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := c.c.NextIDs(ctx, req)
		cancel()
		l.mu.Lock()
		if l.observe != nil {
			l.observe(c.ch, err)
		}
		if err != nil {
			l.errs[c.ch.String()+" "+errCode(err)]++
			l.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if l.seen[space] == nil {
			l.seen[space] = map[int64]bool{}
		}
		l.issued[resp.Channel.String()] += int(resp.Count)
		for _, r := range resp.Ranges {
			if c.ch == idl.Channel_ORDERED {
				if r.First <= last {
					t.Errorf("ORDERED %s went backwards for one caller: %d after %d", space, r.First, last)
				}
				l.ordered += int(r.Last - r.First + 1)
			}
			last = r.Last
			for id := r.First; id <= r.Last; id++ {
				if l.seen[space][id] {
					t.Errorf("%s id %d issued twice", space, id)
				}
				l.seen[space][id] = true
			}
		}
		l.mu.Unlock()
	}
}

// finish stops the callers and waits for them.
func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

// count returns the IDs received from one channel (as the response named it).
func (l *load) count(channel string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.issued[channel]
}

// orderedTotal returns the ORDERED numbers received so far.
func (l *load) orderedTotal() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ordered
}

func errCode(err error) string {
	if ie, ok := err.(*idl.IdgenError); ok {
		return ie.Code.String()
	}
	return "transport"
}

// TestE2E_ClusterMariaDBRestart: three nodes on one MariaDB under load; the
// database is crashed (SIGKILL) and restarted in the middle. UNORDERED keeps
// serving from its buffers, ORDERED fails with SEGMENT_UNAVAILABLE only,
// both recover by themselves, and nothing is issued twice.
func TestE2E_ClusterMariaDBRestart(t *testing.T) {
	zkAddr := os.Getenv("IDGEN_TEST_ZK")
	if zkAddr == "" || os.Getenv("IDGEN_TEST_MYSQL") == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	db := testnode.StartMariaDB(t)
	dsn := testdb.New(t, db.Base())
	_, clients := startCluster(t, 3, zkAddr, dsn)

	var down atomic.Bool
	okDuringOutage := map[idl.Channel]int{} // written by observe under the load's lock
	var callers []caller
	for ni, c := range clients {
		callers = append(callers, caller{c: c, biz: "restart", ch: idl.Channel_UNORDERED})
		for ki := range 2 {
			callers = append(callers, caller{c: c, biz: "restart", ch: idl.Channel_ORDERED, subKey: fmt.Sprintf("key-%d-%d", ni%2, ki)})
		}
	}
	ld := startLoad(t, callers, func(ch idl.Channel, err error) {
		if err == nil {
			if down.Load() {
				okDuringOutage[ch]++
			}
			return
		}
		if code := errCode(err); code != "SEGMENT_UNAVAILABLE" {
			t.Errorf("%s during the outage: %v, want SEGMENT_UNAVAILABLE", ch, err)
		}
	})
	time.Sleep(time.Second)
	db.Kill()
	down.Store(true)
	time.Sleep(2 * time.Second)
	db.Start()
	down.Store(false)
	before := ld.orderedTotal()
	testnode.WaitFor(t, 30*time.Second, "ORDERED serving again after the restart", func() bool {
		return ld.orderedTotal() > before+100
	})
	ld.finish()
	if okDuringOutage[idl.Channel_UNORDERED] == 0 {
		t.Errorf("UNORDERED served nothing while MariaDB was down: the buffers should have carried it")
	}
	t.Logf("unique ids: unordered %d, ordered %d; served during the outage: %v; errors: %v",
		ld.count("UNORDERED"), ld.orderedTotal(), okDuringOutage, ld.errs)
}
