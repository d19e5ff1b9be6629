package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgen"
	"github.com/idgen/idgen/segment/mysqlstore"
)

// clusterEnv returns ZooKeeper and MySQL from ./build.sh test, or skips.
func clusterEnv(t *testing.T) (zkAddr, dsn string) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	return zkAddr, newDatabase(t, base)
}

// newDatabase creates a migrated database on the server of base and
// returns its DSN.
func newDatabase(t *testing.T, base string) (dsn string) {
	name := fmt.Sprintf("idgen_e2e_%d", rand.Uint32())
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name)
		admin.Close()
	})
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	dsn = base + name
	if _, err := mysqlstore.Migrate(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	return dsn
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
			"--heartbeat-interval", "500ms", "--advertise-host", "127.0.0.1", "--auto-create-biz", "true",
			"--properties-dir", t.TempDir()}})
		clients[i] = nodes[i].Client(t)
		testnode.WaitFor(t, 20*time.Second, "node serving", func() bool {
			r, err := clients[i].Clock(context.Background(), &idl.ClockRequest{})
			return err == nil && r.State == "serving"
		})
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

	var mu sync.Mutex
	seen := map[idl.Channel]map[int64]bool{idl.Channel_SNOWFLAKE: {}, idl.Channel_UNORDERED: {}, idl.Channel_ORDERED: {}}
	errs := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for ni := range nodes {
		for ch, w := range []idl.Channel{idl.Channel_SNOWFLAKE, idl.Channel_UNORDERED, idl.Channel_ORDERED} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := int64(0)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					req := &idl.NextIDsRequest{Biz: "e2e", Channel: &w, Count: int32(1 + i%20)}
					if w == idl.Channel_ORDERED {
						req.SubKey = str(fmt.Sprintf("key-%d", ch))
					}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					resp, err := clients[ni].NextIDs(ctx, req)
					cancel()
					mu.Lock()
					if err != nil {
						errs[fmt.Sprintf("%s: %v", w, errCode(err))]++
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
						continue
					}
					for _, r := range resp.Ranges {
						if w == idl.Channel_ORDERED && r.First <= last {
							t.Errorf("ORDERED went backwards for one caller: %d after %d", r.First, last)
						}
						last = r.Last
						for id := r.First; id <= r.Last; id++ {
							if seen[w][id] {
								t.Errorf("%s id %d issued twice", w, id)
							}
							seen[w][id] = true
						}
					}
					mu.Unlock()
				}
			}()
		}
	}
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
	close(stop)
	wg.Wait()
	for w, ids := range seen {
		if len(ids) == 0 {
			t.Errorf("no %s IDs issued", w)
		}
	}
	t.Logf("unique ids: snowflake %d, unordered %d, ordered %d; errors by code: %v",
		len(seen[idl.Channel_SNOWFLAKE]), len(seen[idl.Channel_UNORDERED]), len(seen[idl.Channel_ORDERED]), errs)
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
	dsn := newDatabase(t, db.Base())
	_, clients := startCluster(t, 3, zkAddr, dsn)

	var mu sync.Mutex
	seen := map[string]map[int64]bool{} // channel, or ordered sub key: numbers are per key
	ordered := 0
	var down bool
	okDuringOutage := map[idl.Channel]int{}
	errs := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for ni := range clients {
		for ki, w := range []idl.Channel{idl.Channel_UNORDERED, idl.Channel_ORDERED, idl.Channel_ORDERED} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := int64(0)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					req := &idl.NextIDsRequest{Biz: "restart", Channel: &w, Count: int32(1 + i%10)}
					if w == idl.Channel_ORDERED {
						req.SubKey = str(fmt.Sprintf("key-%d-%d", ni%2, ki))
					}
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					resp, err := clients[ni].NextIDs(ctx, req)
					cancel()
					mu.Lock()
					if err != nil {
						code := errCode(err)
						errs[w.String()+" "+code]++
						if code != "SEGMENT_UNAVAILABLE" {
							t.Errorf("%s during the outage: %v, want SEGMENT_UNAVAILABLE", w, err)
						}
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if down {
						okDuringOutage[w]++
					}
					for _, r := range resp.Ranges {
						if w == idl.Channel_ORDERED && r.First <= last {
							t.Errorf("ORDERED went backwards for one caller: %d after %d", r.First, last)
						}
						last = r.Last
						space := w.String()
						if w == idl.Channel_ORDERED {
							space, ordered = *req.SubKey, ordered+int(r.Last-r.First+1)
						}
						if seen[space] == nil {
							seen[space] = map[int64]bool{}
						}
						for id := r.First; id <= r.Last; id++ {
							if seen[space][id] {
								t.Errorf("%s id %d issued twice", space, id)
							}
							seen[space][id] = true
						}
					}
					mu.Unlock()
				}
			}()
		}
	}
	time.Sleep(time.Second)
	db.Kill()
	mu.Lock()
	down = true
	mu.Unlock()
	time.Sleep(2 * time.Second)
	db.Start()
	mu.Lock()
	down = false
	before := ordered
	mu.Unlock()
	testnode.WaitFor(t, 30*time.Second, "ORDERED serving again after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ordered > before+100
	})
	close(stop)
	wg.Wait()
	if okDuringOutage[idl.Channel_UNORDERED] == 0 {
		t.Errorf("UNORDERED served nothing while MariaDB was down: the buffers should have carried it")
	}
	t.Logf("unique ids: unordered %d, ordered %d; served during the outage: %v; errors: %v",
		len(seen[idl.Channel_UNORDERED.String()]), ordered, okDuringOutage, errs)
}
