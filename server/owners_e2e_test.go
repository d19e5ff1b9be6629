package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/ordered/zkown"
	"github.com/idgen/idgen/segment"
)

// orderedTake asks c for n numbers of (biz, sub), retrying retryable
// refusals (a lease wait, a hand-off) for up to 20 s.
func orderedTake(t *testing.T, c idgensvc.Client, biz, sub string, n int32) *idl.IDRange {
	t.Helper()
	return nextIDsRetrying(t, c, &idl.NextIDsRequest{Biz: biz, Channel: ch(idl.Channel_ORDERED), Count: n, SubKey: &sub}).Ranges[0]
}

// nextIDsRetrying calls NextIDs, retrying for up to 20 s what a caller
// retries (a retryable refusal: ORDERED shards still being claimed after
// a start, a lease wait, a hand-off; a transport error); a non-retryable
// refusal fails the test at once.
func nextIDsRetrying(t *testing.T, c idgensvc.Client, req *idl.NextIDsRequest) *idl.NextIDsResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := c.NextIDs(ctx, req)
		cancel()
		if err == nil {
			return resp
		}
		var ie *idl.IdgenError
		if (errors.As(err, &ie) && !ie.Retryable) || time.Now().After(deadline) {
			t.Fatalf("NextIDs(%+v): %v", req, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestE2E_OrderedOwnersStandalone: a standalone node owns all 64 shards; a
// cached business is served from memory (few store writes), a planned
// restart (SIGTERM) writes back exact counters so both modes continue
// without a gap, and a crash (SIGKILL) costs a cached key at most one
// reservation and a gapless key nothing.
func TestE2E_OrderedOwnersStandalone(t *testing.T) {
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	c := n.Client(t)
	ctx := context.Background()
	for name, mode := range map[string]string{"og": "gapless", "oc": "cached"} {
		if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: name, Channel: ch(idl.Channel_ORDERED), OrderedMode: ptr(mode)}); err != nil {
			t.Fatal(err)
		}
	}
	owners, err := c.OrderedOwners(ctx, &idl.OrderedOwnersRequest{})
	if err != nil || len(owners.Owners) != segment.OrderedShards {
		t.Fatalf("OrderedOwners: %v %v", owners, err)
	}
	for _, o := range owners.Owners {
		if o.Addr != owners.Owners[0].Addr || o.Addr == "" {
			t.Fatalf("standalone owners: %+v", owners.Owners)
		}
	}
	last := map[string]int64{}
	take := func(biz string, want int64) {
		t.Helper()
		r := orderedTake(t, c, biz, "room", 1)
		if want != 0 && r.First != want {
			t.Fatalf("%s: got %d, want %d", biz, r.First, want)
		}
		if r.First <= last[biz] {
			t.Fatalf("%s: got %d after %d", biz, r.First, last[biz])
		}
		last[biz] = r.Last
	}
	for range 200 {
		take("og", last["og"]+1)
		take("oc", last["oc"]+1)
	}
	_, body, _ := n.Get(ctx, "/metrics")
	if !strings.Contains(body, "idgen_ordered_shards_owned 64") {
		t.Fatalf("/metrics lacks idgen_ordered_shards_owned 64")
	}
	// Planned restart: no gap in either mode.
	if err := n.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !n.Wait(20 * time.Second) {
		t.Fatal("no exit after SIGTERM")
	}
	n.Restart(t)
	c = n.Client(t)
	take("og", last["og"]+1)
	take("oc", last["oc"]+1)
	// Crash: gapless continues exactly, cached above (a gap of at most one
	// reservation).
	before := last["oc"]
	n.Kill()
	n.Restart(t)
	c = n.Client(t)
	take("og", last["og"]+1)
	take("oc", 0)
	t.Logf("cached key after a crash: %d after %d (gap %d)", last["oc"], before, last["oc"]-before-1)
}

// startOwnersCluster starts n nodes of a fresh cluster (its name prefix
// and a number) on zkAddr and dsn, serving ORDERED through shard owners on
// 1 s leases, with extra flags; it returns the nodes, their clients and
// their data dirs.
func startOwnersCluster(t *testing.T, n int, prefix, zkAddr, dsn string, extra ...string) ([]*testnode.Node, []idgensvc.Client, []string) {
	t.Helper()
	cluster := fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1_000_000)
	var nodes []*testnode.Node
	var clients []idgensvc.Client
	var dirs []string
	for range n {
		dir := t.TempDir()
		args := append([]string{"--zk", zkAddr, "--cluster", cluster, "--mysql", dsn, "--ordered-lease", "1s",
			"--advertise-host", "127.0.0.1", "--properties-dir", t.TempDir()}, extra...)
		nd := testnode.Start(t, testnode.Options{DataDir: dir, Args: args})
		nodes = append(nodes, nd)
		clients = append(clients, nd.Client(t))
		dirs = append(dirs, dir)
	}
	return nodes, clients, dirs
}

// fastFailover are the flags that have a killed node's slot and shards
// taken over within seconds.
var fastFailover = []string{"--zk-session-timeout", "3s", "--heartbeat-interval", "500ms", "--outage-tolerance", "2s"}

// TestE2E_OrderedOwnersCluster: three nodes share the 64 shards; the same
// key asked from every node in turn (forwarded to its owner) is strictly
// increasing; the owner's SIGKILL costs a lease wait, never order; its
// planned hand-off (SIGTERM) leaves a gapless key without a gap.
func TestE2E_OrderedOwnersCluster(t *testing.T) {
	zkAddr, dsn := clusterEnv(t)
	nodes, clients, _ := startOwnersCluster(t, 3, "own", zkAddr, dsn, fastFailover...)
	ctx := context.Background()
	for name, mode := range map[string]string{"og": "gapless", "oc": "cached"} {
		if _, err := clients[0].CreateBiz(ctx, &idl.CreateBizRequest{Name: name, Channel: ch(idl.Channel_ORDERED), OrderedMode: ptr(mode)}); err != nil {
			t.Fatal(err)
		}
	}
	// Ownership converges: every shard owned by its desired owner among the
	// three (an owner map caught mid-rebalance would move "room" under the
	// forwarding count below).
	list := []string{nodes[0].RPCAddr, nodes[1].RPCAddr, nodes[2].RPCAddr}
	var owner map[int32]string
	testnode.WaitFor(t, 30*time.Second, "64 shards owned by their desired owners among 3 nodes", func() bool {
		resp, err := clients[1].OrderedOwners(ctx, &idl.OrderedOwnersRequest{})
		if err != nil || len(resp.Owners) != 64 {
			return false
		}
		owner = map[int32]string{}
		addrs := map[string]bool{}
		for _, o := range resp.Owners {
			if o.Addr == "" || o.Addr != zkown.DesiredOwner(list, int(o.Shard)) {
				return false
			}
			owner[o.Shard] = o.Addr
			addrs[o.Addr] = true
		}
		return len(addrs) == 3
	})
	last := map[string]int64{}
	take := func(i int, biz string, exact bool) {
		t.Helper()
		r := orderedTake(t, clients[i], biz, "room", 1)
		if r.First <= last[biz] || (exact && r.First != last[biz]+1) {
			t.Fatalf("%s from node %d: got %d after %d (exact %v)", biz, i, r.First, last[biz], exact)
		}
		last[biz] = r.Last
	}
	for i := range 60 {
		take(i%3, "og", true)
		take(i%3, "oc", true)
	}
	testnode.WaitFor(t, 10*time.Second, "every node to see 3 live owners", func() bool {
		for _, nd := range nodes {
			if _, body, _ := nd.Get(ctx, "/metrics"); !strings.Contains(body, "idgen_ordered_live_nodes 3\n") {
				return false
			}
		}
		return true
	})
	forwarded := 0
	for _, nd := range nodes {
		_, body, _ := nd.Get(ctx, "/metrics")
		if strings.Contains(body, "idgen_ordered_forwarded_total") && !strings.Contains(body, "idgen_ordered_forwarded_total 0\n") {
			forwarded++
		}
	}
	if forwarded != 2 {
		t.Fatalf("%d nodes forwarded ORDERED requests, want the 2 that do not own %q's shard", forwarded, "room")
	}
	ownerIdx := -1
	for i, nd := range nodes {
		if nd.RPCAddr == owner[int32(segment.Shard("room"))] {
			ownerIdx = i
		}
	}
	if ownerIdx < 0 {
		t.Fatalf("owner %q of the shard is none of %v", owner[int32(segment.Shard("room"))], nodes)
	}
	other := (ownerIdx + 1) % 3
	// Planned hand-off: the owner stops with SIGTERM; a gapless key goes on
	// without a gap on another node.
	if err := nodes[ownerIdx].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	take(other, "og", true)
	take(other, "oc", true)
	if !nodes[ownerIdx].Wait(20 * time.Second) {
		t.Fatal("no exit after SIGTERM")
	}
	// Crash of the new owner: numbers stay increasing (cached may skip).
	resp, err := clients[other].OrderedOwners(ctx, &idl.OrderedOwnersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	newOwner := resp.Owners[segment.Shard("room")].Addr
	for i, nd := range nodes {
		if i != ownerIdx && nd.RPCAddr == newOwner {
			nd.Kill()
			other = 3 - i - ownerIdx
		}
	}
	take(other, "og", true)
	take(other, "oc", false)
}
