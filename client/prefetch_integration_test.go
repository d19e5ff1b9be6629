package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/client"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestIntegration_PrefetchObfuscatedAndCodes: against a real standalone
// node, a prefetched business with obfuscated IDs is served from the
// buffer (distinct IDs, a bounded number of NextIDs calls), and one with
// codes is refused with ErrNotPrefetchable after one call, not refetched in
// a loop.
func TestIntegration_PrefetchObfuscatedAndCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an idgen node")
	}
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	admin := n.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	unordered, yes, code := idl.Channel_UNORDERED, true, "code"
	for _, req := range []*idl.CreateBizRequest{
		{Name: "obf", Channel: &unordered, Obfuscate: &yes},
		{Name: "codes", Channel: &unordered, Obfuscate: &yes, Format: &code},
	} {
		if _, err := admin.CreateBiz(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// Bounded: a refill that cannot use the answers asks again at once,
	// and the call waits for IDs that never come.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefetching := func(biz string) *client.Client {
		c, err := client.New(client.Config{Addrs: []string{n.RPCAddr}, Prefetch: client.PrefetchConfig{
			Bizs:      []client.PrefetchBiz{{Biz: biz, Channel: client.Unordered}},
			MinBuffer: 100, MaxBuffer: 1000, MaxBatch: 500}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	// Codes first, while no other buffer refills in the background (the
	// count is of every NextIDs call the node answered).
	cc := prefetching("codes")
	before := rpcCount(t, n, "")
	for i := 0; i < 3; i++ {
		if _, err := cc.Next(ctx, "codes"); !errors.Is(err, client.ErrNotPrefetchable) {
			t.Fatalf("Next of a code business: %v, want ErrNotPrefetchable", err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if calls := rpcCount(t, n, "") - before; calls != 1 {
		t.Fatalf("%v NextIDs calls for the code business, want 1", calls)
	}

	c := prefetching("obf")
	before = rpcCount(t, n, "")
	seen := map[int64]bool{}
	const total = 3000
	for len(seen) < total {
		id, err := c.Next(ctx, "obf")
		if err != nil {
			t.Fatalf("Next after %d IDs: %v (NextIDs calls: %v)", len(seen), err, rpcCount(t, n, "")-before)
		}
		if seen[id] || id < 1 {
			t.Fatalf("ID %d handed out twice or not positive", id)
		}
		seen[id] = true
	}
	if calls := rpcCount(t, n, "") - before; calls > total/100+5 {
		t.Fatalf("%v NextIDs calls for %d prefetched IDs (batches of 100..500)", calls, total)
	}

	// Without prefetch, NextN answers obfuscated IDs as ranges of one (it
	// returned no range and no error) and refuses codes.
	plain, err := client.New(client.Config{Addrs: []string{n.RPCAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	rs, err := plain.NextN(ctx, "obf", 5)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, r := range rs {
		for v := r.First; v <= r.Last; v++ {
			if seen[v] || v < 1 {
				t.Fatalf("NextN: ID %d handed out twice or not positive", v)
			}
			seen[v] = true
			got++
		}
	}
	if got != 5 {
		t.Fatalf("NextN(obf, 5) without prefetch: %d IDs in %v, want 5", got, rs)
	}
	if _, err := plain.NextN(ctx, "codes", 2); err == nil || !strings.Contains(err.Error(), "Result.Codes") {
		t.Fatalf("NextN of a code business: %v, want an error naming Fetch and Result.Codes", err)
	}
}
