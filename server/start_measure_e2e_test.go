package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestMeasure_NewClusterFirstID (issue 31, target "node start to first
// SNOWFLAKE ID, new one-node cluster < 300 ms"): from the process's start
// to the first SNOWFLAKE ID of a business created on the node, and to the
// first ORDERED ID, on a new one-node cluster (ZooKeeper + MariaDB: a new
// cluster, a new database) and standalone (a new data dir). It also
// reports, per run, the time from the first SNOWFLAKE ID to the first
// ORDERED ID: what ORDERED adds (its shard claims and first persist), less
// moved by the machine's load on the process's start than either figure.
//
// With IDGEN_MEASURE_BASE_BIN set to another build's idgen binary (say,
// main's: go build -o /tmp/idgen-main ./cmd/idgen in a checkout of main),
// each run starts that build and this tree's one after the other, so the
// two are compared within one run on the same machine load.
//
//	source /work/testenv; IDGEN_MEASURE=1 IDGEN_MEASURE_BASE_BIN=/tmp/idgen-main \
//	  go test ./server -run TestMeasure_NewClusterFirstID -count=1 -v
func TestMeasure_NewClusterFirstID(t *testing.T) {
	measuring(t)
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	// Built before any clock starts (a build inside the first run took
	// seconds).
	builds := []struct{ name, bin string }{{"this tree", testnode.Binary(t, "")}}
	if b := os.Getenv("IDGEN_MEASURE_BASE_BIN"); b != "" {
		builds = append([]struct{ name, bin string }{{"base", b}}, builds...)
	}
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cluster" && (zkAddr == "" || base == "") {
				t.Skip("needs IDGEN_TEST_ZK and IDGEN_TEST_MYSQL")
			}
			biz, sf, ord, gap := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
			for range 5 {
				for _, b := range builds {
					args := []string{"--auto-create-biz", "true"}
					if mode == "cluster" {
						args = append(args, "--zk", zkAddr, "--mysql", testdb.New(t, base), "--cluster", fmt.Sprintf("m%d", rand.Uint32()),
							"--advertise-host", "127.0.0.1", "--properties-dir", t.TempDir())
						testnode.InitCluster(t, args) // as `idctl cluster init`, before the clock starts
					}
					start := time.Now()
					n := testnode.Start(t, testnode.Options{Bin: b.bin, DataDir: t.TempDir(), Args: args, NoWaitStarted: true,
						NoClusterInit: true})
					c, s, o := firstIDs(t, n, start, 60*time.Second)
					biz[b.name] = append(biz[b.name], c)
					sf[b.name], ord[b.name], gap[b.name] = append(sf[b.name], s), append(ord[b.name], o), append(gap[b.name], o-s)
					n.Kill()
				}
			}
			for _, b := range builds {
				report(t, fmt.Sprintf("new one-node %s, start to CreateBiz accepted (%s)", mode, b.name), biz[b.name])
				report(t, fmt.Sprintf("new one-node %s, start to first SNOWFLAKE ID (%s)", mode, b.name), sf[b.name])
				report(t, fmt.Sprintf("new one-node %s, start to first ORDERED ID (%s)", mode, b.name), ord[b.name])
				report(t, fmt.Sprintf("new one-node %s, first SNOWFLAKE ID to first ORDERED ID (%s)", mode, b.name), gap[b.name])
			}
		})
	}
}

// firstIDs creates a business on n (retried until the node takes it), then
// polls SNOWFLAKE until an ID comes and then ORDERED, and returns how long
// after start the business was created and each first ID came.
func firstIDs(t *testing.T, n *testnode.Node, start time.Time, limit time.Duration) (created, snowflake, ordered time.Duration) {
	t.Helper()
	c := n.Client(t)
	ctx := context.Background()
	try := func(what string, call func() error) time.Duration {
		for time.Since(start) < limit {
			if call() == nil {
				return time.Since(start)
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatalf("no %s within %v of the start\n%s", what, limit, n.Logs())
		return 0
	}
	created = try("CreateBiz", func() error {
		_, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "measure", Channel: ch(idl.Channel_SNOWFLAKE), Channels: allChannels})
		return err
	})
	snowflake = try("SNOWFLAKE ID", func() error {
		_, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "measure", Channel: ch(idl.Channel_SNOWFLAKE), Count: 1})
		return err
	})
	ordered = try("ORDERED ID", func() error {
		_, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "measure", Channel: ch(idl.Channel_ORDERED), SubKey: str("k"), Count: 1})
		return err
	})
	return created, snowflake, ordered
}
