package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

func ch(c idl.Channel) *idl.Channel { return &c }
func str(s string) *string          { return &s }

// fetch asks for count IDs and returns them expanded.
func fetch(t *testing.T, c idgensvc.Client, req *idl.NextIDsRequest) []int64 {
	t.Helper()
	resp, err := c.NextIDs(context.Background(), req)
	if err != nil {
		t.Fatalf("NextIDs(%+v): %v", req, err)
	}
	var ids []int64
	for _, r := range resp.Ranges {
		if r.Last < r.First {
			t.Fatalf("bad range %+v", r)
		}
		for id := r.First; id <= r.Last; id++ {
			ids = append(ids, id)
		}
	}
	if int64(len(ids)) != resp.Count || len(ids) != int(req.Count) {
		t.Fatalf("got %d ids (count field %d), asked %d", len(ids), resp.Count, req.Count)
	}
	return ids
}

// TestE2E_AllChannelsKillRestart runs the real binary standalone, takes IDs
// on every channel from concurrent callers, kills it with SIGKILL in the
// middle of traffic, restarts it on the same data dir and checks that
// nothing issued before the kill is issued again.
func TestE2E_AllChannelsKillRestart(t *testing.T) {
	dir := t.TempDir()
	node := testnode.Start(t, testnode.Options{DataDir: dir})
	seen := map[string]map[int64]bool{"snowflake": {}, "unordered": {}, "ordered": {}}
	var mu sync.Mutex
	lastOrdered := int64(0)
	record := func(channel string, ids []int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if seen[channel][id] {
				t.Errorf("%s: id %d issued twice", channel, id)
			}
			seen[channel][id] = true
		}
	}
	round := func(c idgensvc.Client, stop chan struct{}) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					reqs := []struct {
						name string
						req  *idl.NextIDsRequest
					}{
						{"snowflake", &idl.NextIDsRequest{Biz: "order", Channel: ch(idl.Channel_SNOWFLAKE), Count: int32(1 + i%50)}},
						{"unordered", &idl.NextIDsRequest{Biz: "order", Channel: ch(idl.Channel_UNORDERED), Count: int32(1 + i%700)}},
					}
					for _, r := range reqs {
						resp, err := c.NextIDs(context.Background(), r.req)
						if err != nil {
							return // the node was killed
						}
						var ids []int64
						for _, rg := range resp.Ranges {
							for id := rg.First; id <= rg.Last; id++ {
								ids = append(ids, id)
							}
						}
						record(r.name, ids)
					}
					if w == 0 { // one caller on the ordered key keeps it checkable
						resp, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "chat", Channel: ch(idl.Channel_ORDERED), SubKey: str("room-1"), Count: 3})
						if err != nil {
							return
						}
						mu.Lock()
						if resp.Ranges[0].First <= lastOrdered {
							t.Errorf("ordered went backwards: %d after %d", resp.Ranges[0].First, lastOrdered)
						}
						lastOrdered = resp.Ranges[0].Last
						mu.Unlock()
						record("ordered", []int64{resp.Ranges[0].First, resp.Ranges[0].First + 1, resp.Ranges[0].Last})
					}
				}
			}()
		}
		time.Sleep(1500 * time.Millisecond)
		node.Kill() // SIGKILL mid-traffic
		close(stop)
		wg.Wait()
	}
	round(node.Client(t), make(chan struct{}))
	before := map[string]int{}
	for k, v := range seen {
		before[k] = len(v)
		if len(v) == 0 {
			t.Fatalf("no %s IDs before the kill", k)
		}
	}
	node.Restart(t)
	round(node.Client(t), make(chan struct{}))
	for k, v := range seen {
		if len(v) <= before[k] {
			t.Fatalf("no new %s IDs after the restart", k)
		}
	}
	t.Logf("ids checked: snowflake %d, unordered %d, ordered %d", len(seen["snowflake"]), len(seen["unordered"]), len(seen["ordered"]))
}

// TestE2E_GracefulStopWritesHighWater: SIGTERM drains and exits 0.
func TestE2E_GracefulStop(t *testing.T) {
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	c := node.Client(t)
	fetch(t, c, &idl.NextIDsRequest{Biz: "a", Count: 10})
	if err := node.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !node.Wait(20 * time.Second) {
		t.Fatalf("idgen did not exit after SIGTERM\n%s", node.Logs())
	}
	if node.ExitCode() != 0 {
		t.Fatalf("exit code %d\n%s", node.ExitCode(), node.Logs())
	}
	if !strings.Contains(node.Logs(), "idgen stopped") {
		t.Fatalf("no shutdown log\n%s", node.Logs())
	}
}

// TestE2E_BadInput: every bad request gets its code and the server keeps
// serving.
func TestE2E_BadInput(t *testing.T) {
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--auto-create-biz", "false"}})
	c := node.Client(t)
	ctx := context.Background()
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "known", Channels: allChannels}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  *idl.NextIDsRequest
		code idl.ErrorCode
		msg  string
	}{
		{"empty biz", &idl.NextIDsRequest{Biz: "", Count: 1}, idl.ErrorCode_INVALID_ARGUMENT, "biz"},
		{"biz with space", &idl.NextIDsRequest{Biz: "a b", Count: 1}, idl.ErrorCode_INVALID_ARGUMENT, "biz"},
		{"biz starting with dot", &idl.NextIDsRequest{Biz: ".x", Count: 1}, idl.ErrorCode_INVALID_ARGUMENT, "biz"},
		{"biz too long", &idl.NextIDsRequest{Biz: strings.Repeat("a", 129), Count: 1}, idl.ErrorCode_INVALID_ARGUMENT, "biz"},
		{"count negative", &idl.NextIDsRequest{Biz: "known", Count: -5}, idl.ErrorCode_INVALID_ARGUMENT, "count"},
		{"count over max batch", &idl.NextIDsRequest{Biz: "known", Count: 10001}, idl.ErrorCode_INVALID_ARGUMENT, "not clamped"},
		{"unknown channel", &idl.NextIDsRequest{Biz: "known", Channel: ch(7), Count: 1}, idl.ErrorCode_INVALID_ARGUMENT, "channel"},
		{"slow ordered without sub key", &idl.NextIDsRequest{Biz: "known", Channel: ch(idl.Channel_SLOW_ORDERED), Count: 1}, idl.ErrorCode_INVALID_ARGUMENT, "sub_key"},
		{"ordered without sub key", &idl.NextIDsRequest{Biz: "known", Channel: ch(idl.Channel_ORDERED), Count: 1}, idl.ErrorCode_INVALID_ARGUMENT, "sub_key"},
		{"sub key on snowflake", &idl.NextIDsRequest{Biz: "known", Channel: ch(idl.Channel_SNOWFLAKE), SubKey: str("x"), Count: 1}, idl.ErrorCode_INVALID_ARGUMENT, "sub_key"},
		{"unknown biz", &idl.NextIDsRequest{Biz: "nope", Count: 1}, idl.ErrorCode_UNKNOWN_BIZ, "idctl biz create"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.NextIDs(ctx, tc.req)
			var ie *idl.IdgenError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want IdgenError %s", err, tc.code)
			}
			if ie.Code != tc.code || !strings.Contains(ie.Message, tc.msg) {
				t.Fatalf("got %s %q, want %s mentioning %q", ie.Code, ie.Message, tc.code, tc.msg)
			}
			// The server still serves.
			fetch(t, c, &idl.NextIDsRequest{Biz: "known", Count: 2})
		})
	}
	// A refused oversized batch burned nothing: the UNORDERED sequence goes on contiguously.
	a := fetch(t, c, &idl.NextIDsRequest{Biz: "known", Channel: ch(idl.Channel_UNORDERED), Count: 1})
	if _, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "known", Channel: ch(idl.Channel_UNORDERED), Count: 20000}); err == nil {
		t.Fatal("oversized batch accepted")
	}
	b := fetch(t, c, &idl.NextIDsRequest{Biz: "known", Channel: ch(idl.Channel_UNORDERED), Count: 1})
	if b[0] != a[0]+1 {
		t.Fatalf("refused batch burned IDs: %d then %d", a[0], b[0])
	}
	// Admin input errors.
	for _, bad := range []*idl.CreateBizRequest{{Name: "known"}, {Name: "bad name"}, {Name: "s", Step: new(int64(-1))}} {
		if _, err := c.CreateBiz(ctx, bad); err == nil {
			t.Fatalf("CreateBiz(%+v) accepted", bad)
		} else if ie := (*idl.IdgenError)(nil); !errors.As(err, &ie) || ie.Code != idl.ErrorCode_INVALID_ARGUMENT {
			t.Fatalf("CreateBiz(%+v) err = %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

// TestE2E_CountZeroAndSlowOrdered: count unset or 0 means 1 (Go's zero
// value must not beat the IDL default), and the older service's channel 3
// (SLOW_ORDERED) is served by the ORDERED processor, on the same sequence,
// and answered with the value the caller sent.
func TestE2E_CountZeroAndSlowOrdered(t *testing.T) {
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	c := node.Client(t)
	ctx := context.Background()
	for _, chn := range []*idl.Channel{nil, ch(idl.Channel_UNORDERED), ch(idl.Channel_SNOWFLAKE)} {
		resp, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "zero", Channel: chn})
		if err != nil {
			t.Fatalf("count 0 on %v: %v", chn, err)
		}
		if resp.Count != 1 || len(resp.Ranges) != 1 || resp.Ranges[0].First != resp.Ranges[0].Last {
			t.Fatalf("count 0 on %v: got %+v, want one ID", chn, resp)
		}
	}
	a, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "slow", Channel: ch(idl.Channel_ORDERED), SubKey: str("k"), Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "slow", Channel: ch(idl.Channel_SLOW_ORDERED), SubKey: str("k"), Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if b.Channel != idl.Channel_SLOW_ORDERED {
		t.Fatalf("channel 3 answered as %v, want SLOW_ORDERED", b.Channel)
	}
	if b.Count != 3 || b.Ranges[0].First != a.Ranges[0].Last+1 {
		t.Fatalf("SLOW_ORDERED %+v does not continue ORDERED %+v", b.Ranges, a.Ranges)
	}
	// A retry with the same request_id on channel 3 replays the range.
	rid := "slow-retry-1"
	r1, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "slow", Channel: ch(idl.Channel_SLOW_ORDERED), SubKey: str("k"), RequestId: &rid})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "slow", Channel: ch(idl.Channel_SLOW_ORDERED), SubKey: str("k"), RequestId: &rid})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Ranges[0].First != r2.Ranges[0].First || r1.Count != 1 {
		t.Fatalf("request_id replay: %+v then %+v", r1.Ranges, r2.Ranges)
	}
}

// TestE2E_DebugClockAbsentInNormalBuild: the clock-shifting endpoint exists
// only in faultinject builds.
func TestE2E_DebugClockAbsentInNormalBuild(t *testing.T) {
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	code, _, err := node.Post(context.Background(), "/debug/clock?offset_ms=-50")
	if err != nil {
		t.Fatal(err)
	}
	if code != 404 {
		t.Fatalf("POST /debug/clock = %d in a normal build, want 404", code)
	}
}
