package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestReadyzOrderedUnservedShard: a shard this node owns but does not
// serve (here dropped by the allocator, as a fenced term is) makes
// /readyz?channel=ordered 503 shards_unserved and sets
// idgen_ordered_shards_unserved, while /readyz stays 200: every other
// shard and channel serves (issue 29, What to build 5; before, the channel
// answered 200 while the shard stayed down).
func TestReadyzOrderedUnservedShard(t *testing.T) {
	nd, h, srv := startStatusNode(t, "")
	own := nd.serving.Load().owners
	if own == nil || own.health == nil {
		t.Fatal("the standalone node serves ORDERED without shard owners: the test shows nothing")
	}
	own.health.grace.Store(0) // no hand-off to ride out here
	if resp, body := getStatus(t, http.MethodGet, srv.URL+"/readyz?channel=ordered"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz?channel=ordered with every shard served: %d %s", resp.StatusCode, body)
	}
	own.alloc.Lost(5)
	resp, body := getStatus(t, http.MethodGet, srv.URL+"/readyz?channel=ordered")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, chUnserved) || !strings.Contains(body, "[5]") {
		t.Fatalf("/readyz?channel=ordered with shard 5 unserved: %d %s; want 503 %s naming shard 5", resp.StatusCode, body, chUnserved)
	}
	if resp, body := getStatus(t, http.MethodGet, srv.URL+"/readyz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz with one ORDERED shard unserved: %d %s; want 200 (the rest serves)", resp.StatusCode, body)
	}
	ms := family(t, h.m, "idgen_ordered_shards_unserved")
	if len(ms) != 1 || ms[0].GetGauge().GetValue() != 1 {
		t.Fatalf("idgen_ordered_shards_unserved = %v, want 1", ms)
	}
}
