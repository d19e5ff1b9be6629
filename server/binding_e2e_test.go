package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestE2E_OneClusterPerDatabase: a node of a second cluster on a database
// another cluster uses exits at start naming the fix, and the first
// cluster's node keeps serving ORDERED (issue 29, hole k: before, the
// second cluster's node took epochs in ordered_shard, the first cluster's
// owners dropped their shards and kept their leases, and ORDERED stayed
// down). "same name" is two clusters both called the same (as every
// cluster created without --cluster is "default"), on two ZooKeeper roots.
func TestE2E_OneClusterPerDatabase(t *testing.T) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	for _, c := range []struct {
		name    string
		second  func(cluster, root string) (string, string) // the second node's cluster and ZooKeeper root
		refusal []string
	}{
		{"other name", func(cluster, root string) (string, string) { return cluster + "-b", root },
			[]string{"belongs to cluster", "its own database", "idctl db unbind"}},
		{"same name", func(cluster, root string) (string, string) { return cluster, root + "-b" },
			[]string{"another cluster of the same name", "its own database"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := testdb.New(t, base)
			cluster := fmt.Sprintf("bind%d", rand.Uint32())
			root := fmt.Sprintf("/idgen-bind-%d", rand.Uint32())
			common := []string{"--mysql", dsn, "--zk", zkAddr, "--advertise-host", "127.0.0.1"}
			a := testnode.Start(t, testnode.Options{DataDir: t.TempDir(),
				Args: append([]string{"--cluster", cluster, "--zk-root", root, "--properties-dir", t.TempDir()}, common...)})
			a.WaitSnowflake(t, 30*time.Second)
			ctx := context.Background()
			ca := a.Client(t)
			if _, err := ca.CreateBiz(ctx, &idl.CreateBizRequest{Name: "bound", Channel: ch(idl.Channel_ORDERED)}); err != nil {
				t.Fatal(err)
			}
			before := orderedTake(t, ca, "bound", "k", 1)

			cluster2, root2 := c.second(cluster, root)
			b := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), NoWaitStarted: true, MayExit: true,
				Args: append([]string{"--cluster", cluster2, "--zk-root", root2, "--properties-dir", t.TempDir()}, common...)})
			if !b.Wait(60 * time.Second) {
				t.Fatalf("the second cluster's node did not exit; logs:\n%s", b.Logs())
			}
			if b.ExitCode() == 0 {
				t.Fatalf("the second cluster's node exited 0; logs:\n%s", b.Logs())
			}
			logs := b.Logs()
			for _, w := range append([]string{cluster}, c.refusal...) {
				if !strings.Contains(logs, w) {
					t.Errorf("the refusal does not say %q:\n%s", w, logs)
				}
			}
			// The first cluster kept every shard: ORDERED continues above.
			if after := orderedTake(t, ca, "bound", "k", 1); after.First <= before.Last {
				t.Fatalf("ORDERED after the refusal answered %d, not above %d", after.First, before.Last)
			}
			testnode.WaitFor(t, 30*time.Second, "the first node ready for ORDERED", func() bool {
				code, _, err := a.Get(ctx, "/readyz?channel=ordered")
				return err == nil && code == 200
			})
		})
	}
}
