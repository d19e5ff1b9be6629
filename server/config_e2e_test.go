package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// TestE2E_TwoNodesEveryConfiguration is the configuration table of issue 9:
// for each way a user can start idgen, two nodes on one backend either
// refuse (the second one, with a message that names the fix) or together
// issue no ID twice on any channel, and see the same businesses.
func TestE2E_TwoNodesEveryConfiguration(t *testing.T) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	fast := []string{"--heartbeat-interval", "500ms", "--outage-tolerance", "2s", "--advertise-host", "127.0.0.1",
		"--zk-session-timeout", "3s"}
	type config struct {
		name     string
		servers  bool // needs ZooKeeper and MariaDB
		args     func(t *testing.T) []string
		shareDir bool // both nodes on one data dir (standalone's only shared backend)
		// refuse: the second node must exit with a message containing each of these.
		refuse []string
		// segments: UNORDERED and ORDERED are offered (else refused naming --mysql).
		segments bool
	}
	cases := []config{
		{name: "standalone", shareDir: true, refuse: []string{"in use by another idgen process", "--data-dir"},
			args: func(t *testing.T) []string { return nil }},
		{name: "zk only", servers: true, args: func(t *testing.T) []string {
			// One ZooKeeper server without MySQL: refused unless accepted
			// explicitly (TestValidateSingleZooKeeperWithoutMySQL).
			return []string{"--zk", zkAddr, "--zk-single-server-unwitnessed", "--cluster", fmt.Sprintf("cfg%d", rand.Uint32())}
		}},
		{name: "mysql only", servers: true, segments: true, args: func(t *testing.T) []string {
			return []string{"--mysql", testdb.New(t, base), "--cluster", fmt.Sprintf("cfg%d", rand.Uint32())}
		}},
		{name: "zk and mysql", servers: true, segments: true, args: func(t *testing.T) []string {
			return []string{"--zk", zkAddr, "--mysql", testdb.New(t, base), "--cluster", fmt.Sprintf("cfg%d", rand.Uint32())}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.servers && (zkAddr == "" || base == "") {
				t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
			}
			args := append(tc.args(t), fast...)
			dir := t.TempDir()
			a := testnode.Start(t, testnode.Options{DataDir: dir, Args: args})
			if tc.refuse != nil {
				b := startRefused(t, dir, args)
				for _, want := range tc.refuse {
					if !strings.Contains(b, want) {
						t.Errorf("second node's refusal does not say %q:\n%s", want, b)
					}
				}
				return
			}
			b := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: args})
			ca, cb := a.Client(t), b.Client(t)
			a.WaitSnowflake(t, 30*time.Second)
			b.WaitSnowflake(t, 30*time.Second)
			ctx := context.Background()

			// Businesses are shared cluster-wide: created on A, used on B.
			biz := "shared"
			create := &idl.CreateBizRequest{Name: biz, Channel: ch(idl.Channel_SNOWFLAKE)}
			if tc.segments {
				create.Channels = allChannels
			}
			if _, err := ca.CreateBiz(ctx, create); err != nil {
				t.Fatalf("CreateBiz on A: %v", err)
			}
			testnode.WaitFor(t, 10*time.Second, "business visible on B", func() bool {
				_, err := cb.GetBiz(ctx, &idl.GetBizRequest{Name: biz})
				return err == nil
			})

			seen := map[string]map[int64]string{}
			take := func(node string, c idgensvc.Client, channel idl.Channel, subKey string) {
				t.Helper()
				space := "biz"
				req := &idl.NextIDsRequest{Biz: biz, Channel: &channel, Count: 100}
				if channel == idl.Channel_ORDERED {
					req.SubKey, space = &subKey, "ordered/"+subKey
				}
				for i := 0; i < 20; i++ {
					resp, err := c.NextIDs(ctx, req)
					if err != nil {
						t.Fatalf("%s %s: %v", node, channel, err)
					}
					if seen[space] == nil {
						seen[space] = map[int64]string{}
					}
					for _, r := range resp.Ranges {
						for id := r.First; id <= r.Last; id++ {
							if prev, dup := seen[space][id]; dup {
								t.Fatalf("%s id %d issued by %s and by %s %s", space, id, prev, node, channel)
							}
							seen[space][id] = node + " " + channel.String()
						}
					}
				}
			}
			for _, n := range []struct {
				name string
				c    idgensvc.Client
			}{{"A", ca}, {"B", cb}} {
				take(n.name, n.c, idl.Channel_SNOWFLAKE, "")
				if !tc.segments {
					for _, channel := range []idl.Channel{idl.Channel_UNORDERED, idl.Channel_ORDERED} {
						req := &idl.NextIDsRequest{Biz: biz, Channel: &channel, Count: 1, SubKey: str("k")}
						if channel == idl.Channel_UNORDERED {
							req.SubKey = nil
						}
						_, err := n.c.NextIDs(ctx, req)
						var ie *idl.IdgenError
						if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_SEGMENT_UNAVAILABLE || ie.Retryable || !strings.Contains(ie.Message, "--mysql") {
							t.Errorf("%s %s without a shared counter store: %v; want SEGMENT_UNAVAILABLE, not retryable, naming --mysql", n.name, channel, err)
						}
					}
					continue
				}
				take(n.name, n.c, idl.Channel_UNORDERED, "")
				take(n.name, n.c, idl.Channel_ORDERED, "k")
			}
			ra, _ := ca.Clock(ctx, &idl.ClockRequest{})
			rb, _ := cb.Clock(ctx, &idl.ClockRequest{})
			if ra.Worker == rb.Worker {
				t.Errorf("both nodes hold worker %d", ra.Worker)
			}
		})
	}
}

// startRefused starts a second node that is expected to exit at start and
// returns what it printed.
func startRefused(t *testing.T, dataDir string, args []string) string {
	t.Helper()
	n := testnode.Start(t, testnode.Options{DataDir: dataDir, Args: args, NoWaitStarted: true, MayExit: true})
	if !n.Wait(30 * time.Second) {
		t.Fatalf("second node did not refuse to start; logs:\n%s", n.Logs())
	}
	if n.ExitCode() == 0 {
		t.Fatalf("second node exited 0; logs:\n%s", n.Logs())
	}
	return n.Logs()
}
