package scenario

import (
	"fmt"
	"testing"

	"github.com/idgen/idgen/segment"
)

// TestJavaShard: the suite's own shard function agrees with the service's
// (the hot keys must all be in the shard the scenario faults).
func TestJavaShard(t *testing.T) {
	keys := []string{"", "a", "k0", "hot1", "order:4711", "日本語", "emoji 😀 key", "polygenelubricants"}
	for i := range 2000 {
		keys = append(keys, fmt.Sprintf("cold%d", i), fmt.Sprintf("hot%d", i))
	}
	for _, k := range keys {
		if got, want := javaShard(k), segment.Shard(k); got != want {
			t.Errorf("javaShard(%q) = %d, segment.Shard = %d", k, got, want)
		}
	}
	// "polygenelubricants".hashCode() is Integer.MIN_VALUE: shard 0.
	if got := javaShard("polygenelubricants"); got != 0 {
		t.Errorf("javaShard(MIN_VALUE key) = %d, want 0", got)
	}
	for s := range 64 {
		ks := keysInShard(s, "hot", 3)
		if len(ks) != 3 {
			t.Fatalf("shard %d: %v", s, ks)
		}
		for _, k := range ks {
			if segment.Shard(k) != s {
				t.Errorf("keysInShard(%d) gave %q of shard %d", s, k, segment.Shard(k))
			}
		}
	}
}
