package server

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestE2E_RequestIDsScopedToTheToken is issue 30, item 3, on a real
// two-node cluster: one node forwards the key's ORDERED requests to the
// other, the shard's owner. Before, a second caller of the business who
// reused the victim's request id got the victim's exact range back,
// learned its sub key and count from the error (shown on /status too),
// and could claim an id the victim would use later. Now ids are scoped to
// the token: each caller gets its own ranges, a retry through either node
// replays the caller's own range, and no refusal names the victim's sub
// key or count.
func TestE2E_RequestIDsScopedToTheToken(t *testing.T) {
	zkAddr, dsn := clusterEnv(t)
	nodes, clients, _ := startOwnersCluster(t, 2, "rid", zkAddr, dsn)
	ctx := context.Background()
	if _, err := clients[0].CreateBiz(ctx, &idl.CreateBizRequest{Name: "scoped", Channel: ch(idl.Channel_ORDERED), OrderedMode: ptr("gapless")}); err != nil {
		t.Fatal(err)
	}
	token := func(label string) string {
		resp, err := clients[0].CreateBizToken(ctx, &idl.CreateBizTokenRequest{Biz: "scoped", Label: &label})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Secret
	}
	victimTok, attackerTok := token("victim"), token("attacker")
	const secretSub = "secret-room-42"
	req := func(tok, sub, rid string, n int32) *idl.NextIDsRequest {
		return &idl.NextIDsRequest{Biz: "scoped", Channel: ch(idl.Channel_ORDERED), Count: n, SubKey: &sub, RequestId: &rid, Token: &tok}
	}
	// Both nodes see the tokens (the business cache refreshes in ~2 s).
	victim := nextIDsRetrying(t, clients[0], req(victimTok, secretSub, "r-1", 17)).Ranges[0]
	testnode.WaitFor(t, 20*time.Second, "node 1 to accept the attacker's token", func() bool {
		_, err := clients[1].NextIDs(ctx, req(attackerTok, "warm-up", "w", 1))
		return err == nil
	})

	// Through each node: the attacker's reuse of the id is a request of its
	// own, and the victim's retry replays the victim's range.
	for i, c := range clients {
		a := nextIDsRetrying(t, c, req(attackerTok, secretSub, "r-1", 17)).Ranges[0]
		if a.First <= victim.Last {
			t.Fatalf("node %d: another token reusing the victim's request id got %d..%d; the victim had %d..%d",
				i, a.First, a.Last, victim.First, victim.Last)
		}
		if v := nextIDsRetrying(t, c, req(victimTok, secretSub, "r-1", 17)).Ranges[0]; v.First != victim.First || v.Last != victim.Last {
			t.Fatalf("node %d: the victim's retry got %d..%d, want %d..%d", i, v.First, v.Last, victim.First, victim.Last)
		}
		t.Logf("node %d: victim %d..%d, another token with the same request id %d..%d", i, victim.First, victim.Last, a.First, a.Last)
	}
	// An id the attacker claims first does not block the victim.
	nextIDsRetrying(t, clients[1], req(attackerTok, "elsewhere", "future", 1))
	nextIDsRetrying(t, clients[0], req(victimTok, secretSub, "future", 17))

	// A mismatch (the victim's own, within its scope) names neither the
	// stored sub key nor the stored count, on either node...
	count17 := regexp.MustCompile(`\b17\b`)
	for i, c := range clients {
		_, err := c.NextIDs(ctx, req(victimTok, "other", "r-1", 2))
		var ie *idl.IdgenError
		if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_INVALID_ARGUMENT || ie.Retryable {
			t.Fatalf("node %d: reused id: %v, want INVALID_ARGUMENT", i, err)
		}
		if strings.Contains(ie.Message, secretSub) || count17.MatchString(ie.Message) || !strings.Contains(ie.Message, "use a new request_id") {
			t.Fatalf("node %d: mismatch %q names the stored sub key or count, or not what to do", i, ie.Message)
		}
	}
	// ... and nothing of the victim's request shows on /status.
	for i, nd := range nodes {
		code, body, err := nd.Get(ctx, "/status")
		if err != nil || code != 200 {
			t.Fatalf("node %d /status: %d %v", i, code, err)
		}
		if strings.Contains(body, secretSub) {
			t.Fatalf("node %d /status shows the victim's sub key %q", i, secretSub)
		}
	}
}
