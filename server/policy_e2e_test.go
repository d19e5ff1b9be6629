package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/ordered/zkown"
	"github.com/idgen/idgen/segment"
)

// auditRecords reads the audit records of biz from the node's audit file.
func auditRecords(t *testing.T, dataDir, biz string) []map[string]any {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
	var recs []map[string]any
	for line := range strings.Lines(string(b)) {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["biz"] == biz {
			recs = append(recs, r)
		}
	}
	return recs
}

// maxPassed is the most requests a limit of perSec with a bucket of burst
// can let through in elapsed: the burst plus what the bucket earned. Tests
// of the limits compare with it instead of assuming how fast they ran.
func maxPassed(burst, perSec int, elapsed time.Duration) int {
	return burst + int(elapsed.Seconds()*float64(perSec)) + 1
}

// TestE2E_OrderedTakeOnePolicy: OrderedTake, the ORDERED hop of older
// nodes, goes through the policy of NextIDs (issue 30, item 2): a count
// above max_batch is refused, the rate limit and the ID quota count it,
// the audit plugin records it, and a business whose output is obfuscated
// IDs or codes is refused before anything is allocated (its raw counters
// never leave the node). Before the fix OrderedTake answered 100,000,000
// numbers on a business limited to 100 IDs/s, and raw counters of an
// obfuscated business.
func TestE2E_OrderedTakeOnePolicy(t *testing.T) {
	dir := t.TempDir()
	n := testnode.Start(t, testnode.Options{DataDir: dir})
	c := n.Client(t)
	ctx := context.Background()
	for _, b := range []*idl.CreateBizRequest{
		{Name: "rl", Channel: ch(idl.Channel_ORDERED), RateLimit: ptr(int32(2)), IdQuota: ptr(int64(100)), Plugins: []string{"audit"}},
		{Name: "quota", Channel: ch(idl.Channel_ORDERED), IdQuota: ptr(int64(1)), IdBurst: ptr(int64(100))},
		{Name: "obf", Channel: ch(idl.Channel_ORDERED), Obfuscate: ptr(true)},
		{Name: "code", Channel: ch(idl.Channel_ORDERED), Format: ptr("code")},
	} {
		if _, err := c.CreateBiz(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	take := func(biz string, count int32) (*idl.OrderedTakeResponse, error) {
		return c.OrderedTake(ctx, &idl.OrderedTakeRequest{Biz: biz, SubKey: "room", Count: count})
	}

	// max_batch (10000 by default): nothing reachable asks for more.
	for _, count := range []int32{10_001, 100_000_000} {
		resp, err := take("quota", count)
		ie := mustCode(t, fmt.Sprintf("OrderedTake of %d", count), err, idl.ErrorCode_INVALID_ARGUMENT)
		if !strings.Contains(ie.Message, "max_batch") {
			t.Fatalf("OrderedTake of %d: %q (%v), want a message naming max_batch", count, ie.Message, resp)
		}
	}

	// The ID quota: the burst passes, the next 100 wait 100 s at 1 ID/s.
	if _, err := take("quota", 100); err != nil {
		t.Fatalf("the quota's burst: %v", err)
	}
	_, err := take("quota", 100)
	mustCode(t, "OrderedTake over the ID quota", err, idl.ErrorCode_RATE_LIMITED)
	_, err = take("quota", 101)
	mustCode(t, "OrderedTake above id_burst", err, idl.ErrorCode_INVALID_ARGUMENT)

	// The business of the measurement: 2 requests/s, 100 IDs/s.
	// 200 calls for 10,000 IDs each (2,000,000 IDs with 0 refusals before
	// the fix) are all refused: above the quota's burst, they never pass.
	for i := range 200 {
		_, err := take("rl", 10_000)
		mustCode(t, fmt.Sprintf("OrderedTake %d of 10,000 IDs on a quota of 100/s", i), err, idl.ErrorCode_INVALID_ARGUMENT)
	}
	// 200 calls for 1 ID: at most what the 2 requests/s bucket holds and
	// earns pass (NextIDs: 2 ok, 198 refused); the others are RATE_LIMITED.
	start := time.Now()
	ok := 0
	for i := range 200 {
		_, err := take("rl", 1)
		if err == nil {
			ok++
			continue
		}
		mustCode(t, fmt.Sprintf("OrderedTake %d over the rate limit", i), err, idl.ErrorCode_RATE_LIMITED)
	}
	elapsed := time.Since(start)
	if limit := maxPassed(2, 2, elapsed); ok > limit || ok == 0 {
		t.Fatalf("%d of 200 OrderedTake calls passed a limit of 2 requests/s (at most %d in %v)", ok, limit, elapsed)
	}
	t.Logf("OrderedTake on a business of 2 requests/s and 100 IDs/s: 200 calls of 10,000 IDs all refused; of 200 calls of 1 ID, %d ok and %d refused in %v",
		ok, 200-ok, elapsed.Round(time.Millisecond))
	// Every answered call has its audit record.
	testnode.WaitFor(t, 15*time.Second, fmt.Sprintf("%d audit records of rl", ok), func() bool {
		return len(auditRecords(t, dir, "rl")) >= ok
	})
	if recs := auditRecords(t, dir, "rl"); len(recs) != ok {
		t.Fatalf("%d audit records for %d answered OrderedTake calls: %v", len(recs), ok, recs)
	}
	_, body, _ := n.Get(ctx, "/metrics")
	if !strings.Contains(body, `idgen_rate_limited_total{biz="rl",limit="requests"}`) {
		t.Fatalf("/metrics counts no rate-limited OrderedTake of rl:\n%s", grepLines(body, "rate_limited"))
	}

	// Obfuscated IDs and codes: refused, and nothing was allocated (the
	// first number NextIDs then hands out is start_num, 1).
	for _, biz := range []string{"obf", "code"} {
		resp, err := take(biz, 5)
		ie := mustCode(t, "OrderedTake of "+biz, err, idl.ErrorCode_INVALID_ARGUMENT)
		if !strings.Contains(ie.Message, "send NextIDs") {
			t.Fatalf("OrderedTake of %s: %q (%v), want a message saying to send NextIDs", biz, ie.Message, resp)
		}
		out, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: biz, Channel: ch(idl.Channel_ORDERED), SubKey: str("room"), Count: 1})
		if err != nil || len(out.Ranges) != 0 || len(out.Ids)+len(out.Codes) != 1 {
			t.Fatalf("NextIDs of %s: %+v, %v; want one obfuscated value and no range", biz, out, err)
		}
		v := fmt.Sprint(out.Ids)
		if len(out.Codes) == 1 {
			v = out.Codes[0]
		} else {
			v = strings.Trim(v, "[]")
		}
		d, err := c.Decode(ctx, &idl.DecodeRequest{Biz: biz, Value: v})
		if err != nil || d.Number != 1 {
			t.Fatalf("Decode(%s, %s): %+v, %v; want 1 (the refused OrderedTake allocated nothing)", biz, v, d, err)
		}
	}
}

// TestE2E_ForwardedOrderedOnePolicy: in a two-node cluster an ORDERED
// request sent to the node that does not own its shard is forwarded whole
// to the owner and checked there, once: the owner's ID quota counts it
// (the non-owner refuses nothing and audits nothing), the owner's audit
// file has exactly one record per answered request, with the socket
// address of the node that connected (the forwarding node) as the caller
// and the owner as served_by; an obfuscated business's answer comes back
// in its final form; a count above max_batch is refused; a client that
// sets no_forward at a non-owner only gets a retryable refusal. Before the
// fix the non-owner applied the policy and sent the owner a raw
// OrderedTake, so the two nodes' quotas each let a burst through and the
// owner audited nothing.
func TestE2E_ForwardedOrderedOnePolicy(t *testing.T) {
	zkAddr, dsn := clusterEnv(t)
	nodes, clients, dirs := startOwnersCluster(t, 2, "pol", zkAddr, dsn, fastFailover...)
	ctx := context.Background()
	for _, b := range []*idl.CreateBizRequest{
		{Name: "fq", Channel: ch(idl.Channel_ORDERED), IdQuota: ptr(int64(1)), IdBurst: ptr(int64(10)), Plugins: []string{"audit"}},
		{Name: "fobf", Channel: ch(idl.Channel_ORDERED), Obfuscate: ptr(true)},
	} {
		if _, err := clients[0].CreateBiz(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// Both nodes own shards; pick a sub key that node 1 owns, as both
	// nodes see it. While both nodes live, a node takes only shards whose
	// rendezvous-hash owner it is (zkown), so once every shard is with its
	// desired owner nothing moves and the test's key stays where it is.
	var owner map[int32]string
	list := []string{nodes[0].RPCAddr, nodes[1].RPCAddr}
	testnode.WaitFor(t, 30*time.Second, "64 shards owned by their desired owners among 2 nodes, the same map on both", func() bool {
		var maps [2]map[int32]string
		for i, c := range clients {
			resp, err := c.OrderedOwners(ctx, &idl.OrderedOwnersRequest{})
			if err != nil || len(resp.Owners) != segment.OrderedShards {
				return false
			}
			maps[i] = map[int32]string{}
			for _, o := range resp.Owners {
				if o.Addr == "" || o.Addr != zkown.DesiredOwner(list, int(o.Shard)) {
					return false
				}
				maps[i][o.Shard] = o.Addr
			}
		}
		addrs := map[string]bool{}
		for s, a := range maps[0] {
			if maps[1][s] != a {
				return false
			}
			addrs[a] = true
		}
		owner = maps[0]
		return len(addrs) == 2
	})
	sub := ""
	for i := 0; sub == ""; i++ {
		if k := fmt.Sprintf("k%d", i); owner[int32(segment.Shard(k))] == nodes[1].RPCAddr {
			sub = k
		}
	}
	via := func(i int, biz string, count int32) (*idl.NextIDsResponse, error) {
		return clients[i].NextIDs(ctx, &idl.NextIDsRequest{Biz: biz, Channel: ch(idl.Channel_ORDERED), SubKey: &sub, Count: count})
	}

	// A count above max_batch is refused wherever it comes in.
	_, err := via(0, "fq", 10_001)
	mustCode(t, "forwarded count above max_batch", err, idl.ErrorCode_INVALID_ARGUMENT)

	// The ID quota (burst 10, 1 ID/s) counts each request once, at the
	// owner: 10 through node 0 and 10 straight to node 1 pass at most the
	// one burst between them (before the fix: both bursts, 20).
	start := time.Now()
	ok := 0
	for i := range 20 {
		resp, err := via(i/10, "fq", 1)
		if err == nil {
			if len(resp.Ranges) != 1 || resp.Count != 1 {
				t.Fatalf("request %d: %+v", i, resp)
			}
			ok++
			continue
		}
		ie := mustCode(t, fmt.Sprintf("request %d over the quota", i), err, idl.ErrorCode_RATE_LIMITED)
		if i < 10 && !strings.Contains(ie.Message, nodes[1].RPCAddr) {
			t.Errorf("refusal relayed by node 0: %q, want it to name the owner %s", ie.Message, nodes[1].RPCAddr)
		}
	}
	elapsed := time.Since(start)
	if limit := maxPassed(10, 1, elapsed); ok > limit || ok < 10 {
		t.Fatalf("%d of 20 requests passed an ID quota of burst 10 and 1 ID/s through two nodes (want 10 to %d in %v)", ok, limit, elapsed)
	}
	t.Logf("ID quota of burst 10 and 1 ID/s: %d of 20 requests (10 through the non-owner, 10 to the owner) passed in %v",
		ok, elapsed.Round(time.Millisecond))
	m0, m1 := scrape(t, nodes[0]), scrape(t, nodes[1])
	if v := m0["idgen_rate_limited_total|biz=fq|limit=ids"]; v != 0 {
		t.Errorf("the forwarding node refused %v requests itself; the owner alone applies the quota", v)
	}
	if v := m1["idgen_rate_limited_total|biz=fq|limit=ids"]; int(v) != 20-ok {
		t.Errorf("the owner counts %v quota refusals, want %d", v, 20-ok)
	}
	if m0["idgen_ordered_forwarded_total"] < 10 {
		t.Errorf("node 0 forwarded %v requests, want at least 10", m0["idgen_ordered_forwarded_total"])
	}

	// OrderedTake (the hop of older nodes) draws on the same quota at the
	// owner, and a non-owner refuses it (retryable) before its policy:
	// never a further hop, no quota, no audit record.
	_, err = clients[1].OrderedTake(ctx, &idl.OrderedTakeRequest{Biz: "fq", SubKey: sub, Count: 1})
	mustCode(t, "OrderedTake at the owner after NextIDs drained the quota", err, idl.ErrorCode_RATE_LIMITED)
	_, err = clients[0].OrderedTake(ctx, &idl.OrderedTakeRequest{Biz: "fq", SubKey: sub, Count: 1})
	if ie := mustCode(t, "OrderedTake at the non-owner", err, idl.ErrorCode_SEGMENT_UNAVAILABLE); !ie.Retryable {
		t.Fatalf("OrderedTake at the non-owner: %v, want retryable", ie)
	}

	// Audited once, by the owner, with the connecting socket's address.
	testnode.WaitFor(t, 15*time.Second, fmt.Sprintf("%d audit records of fq on the owner", ok), func() bool {
		return len(auditRecords(t, dirs[1], "fq")) >= ok
	})
	recs := auditRecords(t, dirs[1], "fq")
	if len(recs) != ok {
		t.Fatalf("the owner has %d audit records for %d answered requests", len(recs), ok)
	}
	for _, r := range recs {
		caller, _ := r["caller"].(string)
		if !strings.HasPrefix(caller, "127.0.0.1:") || r["served_by"] != nodes[1].RPCAddr || r["error"] != nil {
			t.Errorf("audit record %v: want caller 127.0.0.1:PORT (the socket), served_by %s, no error", r, nodes[1].RPCAddr)
		}
	}
	if recs := auditRecords(t, dirs[0], "fq"); len(recs) != 0 {
		t.Errorf("the forwarding node audited %d requests it did not answer: %v", len(recs), recs)
	}

	// The owner's final output is relayed: obfuscated IDs, no ranges.
	resp, err := via(0, "fobf", 3)
	if err != nil || len(resp.Ranges) != 0 || len(resp.Ids) != 3 || resp.Count != 3 {
		t.Fatalf("forwarded obfuscated request: %+v, %v; want 3 IDs and no range", resp, err)
	}
	for i, id := range resp.Ids {
		d, err := clients[0].Decode(ctx, &idl.DecodeRequest{Biz: "fobf", Value: fmt.Sprint(id)})
		if err != nil || d.Number != int64(i+1) {
			t.Fatalf("Decode(%d): %+v, %v; want %d", id, d, err, i+1)
		}
	}

	// A client that sets no_forward at the non-owner: a retryable refusal.
	yes := true
	_, err = clients[0].NextIDs(ctx, &idl.NextIDsRequest{Biz: "fobf", Channel: ch(idl.Channel_ORDERED), SubKey: &sub, Count: 1, NoForward: &yes})
	if ie := mustCode(t, "no_forward at the non-owner", err, idl.ErrorCode_SEGMENT_UNAVAILABLE); !ie.Retryable {
		t.Fatalf("no_forward at the non-owner: %v, want retryable", ie)
	}
}
