package server

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/worker"
	"github.com/idgen/idgen/worker/mysqllease"
)

// TestE2E_OneRegistryPerCluster: a cluster holds its worker slots in one
// registry. On one database and one cluster name, once a node of one kind
// (--mysql alone: MySQL-held slots; --zk --mysql: ZooKeeper-held) runs, a
// node of the other kind exits at start naming the registry and `idctl
// cluster migrate`, and the running node keeps serving.
func TestE2E_OneRegistryPerCluster(t *testing.T) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	fast := []string{"--heartbeat-interval", "500ms", "--outage-tolerance", "2s", "--advertise-host", "127.0.0.1",
		"--zk-session-timeout", "3s"}
	for _, c := range []struct {
		name          string
		first, second []string // flags beyond --mysql and --cluster
		registry      string   // recorded by the first node
		refusal       []string // in the second node's log
	}{
		{"mysql first", nil, []string{"--zk", zkAddr}, mysqllease.RegistryMySQL,
			[]string{"holds its worker slots in MySQL", "this node uses ZooKeeper (--zk)", "idctl cluster migrate", "--to zookeeper"}},
		{"zookeeper first", []string{"--zk", zkAddr}, nil, mysqllease.RegistryZooKeeper,
			[]string{"holds its worker slots in ZooKeeper", "--mysql without --zk", "idctl cluster migrate", "--to mysql"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := testdb.New(t, base)
			cluster := fmt.Sprintf("reg%d", rand.Uint32())
			common := append([]string{"--mysql", dsn, "--cluster", cluster, "--properties-dir", t.TempDir()}, fast...)
			a := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: append(append([]string{}, common...), c.first...)})
			a.WaitSnowflake(t, 30*time.Second)

			db, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			if r, ok, err := mysqllease.ClusterRegistry(ctx, db, cluster); err != nil || !ok || r != c.registry {
				t.Fatalf("registry after the first node: %q, %v, %v; want %q", r, ok, err, c.registry)
			}

			b := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), NoWaitStarted: true, MayExit: true,
				Args: append(append([]string{}, common...), c.second...)})
			if !b.Wait(30 * time.Second) {
				t.Fatalf("the node of the other registry did not exit; logs:\n%s", b.Logs())
			}
			if b.ExitCode() == 0 {
				t.Fatalf("the node of the other registry exited 0; logs:\n%s", b.Logs())
			}
			logs := b.Logs()
			for _, w := range append([]string{cluster}, c.refusal...) {
				if !strings.Contains(logs, w) {
					t.Errorf("the refusal does not say %q:\n%s", w, logs)
				}
			}

			// Nothing changed: the registry, and the first node serves.
			if r, _, err := mysqllease.ClusterRegistry(ctx, db, cluster); err != nil || r != c.registry {
				t.Errorf("registry after the refusal: %q, %v; want %q", r, err, c.registry)
			}
			if _, live, err := mysqllease.Marks(ctx, db, cluster); err != nil || live != (c.registry == mysqllease.RegistryMySQL) {
				t.Errorf("MySQL leases live %v (%v) after the refusal; want live only for the MySQL-held cluster", live, err)
			}
			ca := a.Client(t)
			if _, err := ca.CreateBiz(ctx, &idl.CreateBizRequest{Name: "reg", Channel: ch(idl.Channel_SNOWFLAKE)}); err != nil {
				t.Fatalf("CreateBiz on the first node: %v", err)
			}
			if _, err := ca.NextIDs(ctx, &idl.NextIDsRequest{Biz: "reg", Channel: ch(idl.Channel_SNOWFLAKE), Count: 10}); err != nil {
				t.Errorf("the first node after the refusal: %v", err)
			}
			// The refused ZooKeeper node held a slot briefly: it is free again.
			zc, err := worker.DialZK(ctx, strings.Split(zkAddr, ","), worker.DefaultSessionTimeout, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer zc.Close()
			want := 0
			if c.registry == mysqllease.RegistryZooKeeper {
				want = 1 // the first node's
			}
			testnode.WaitFor(t, 15*time.Second, fmt.Sprintf("%d slot(s) held in ZooKeeper", want), func() bool {
				held, err := worker.ZKRegistry{Conn: zc, Root: worker.DefaultRoot, Cluster: cluster}.Held(ctx)
				return err == nil && len(held) == want
			})
		})
	}
}
