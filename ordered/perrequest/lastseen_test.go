package perrequest

import (
	"fmt"
	"testing"
)

func TestLastSeen(t *testing.T) {
	s := newLastSeen(lruShards) // one key per shard
	s.raise("a", 5)
	s.raise("a", 3) // never lowered
	if got := s.get("a"); got != 5 {
		t.Fatalf("get(a) = %d, want 5", got)
	}
	if got := s.get("missing"); got != 0 {
		t.Fatalf("get(missing) = %d, want 0", got)
	}
	for i := range 1000 {
		s.raise(fmt.Sprint("k", i), int64(i))
	}
	if n := s.len(); n > lruShards {
		t.Fatalf("%d keys kept, want at most %d", n, lruShards)
	}
	// The most recent key of its shard survives.
	if got := s.get("k999"); got != 999 {
		t.Fatalf("get(k999) = %d, want 999", got)
	}
}
