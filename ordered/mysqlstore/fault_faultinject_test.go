//go:build faultinject

package mysqlstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStallFor: the IDGEN_FAULT_ORDERED_PERSIST_STALL file asks one stall
// ("<shard> <duration>") or a stall of every persist ("... every") of one
// shard; anything else, another shard or no file asks none.
func TestStallFor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stall")
	t.Setenv("IDGEN_FAULT_ORDERED_PERSIST_STALL", path)
	if d, every := stallFor(3); d != 0 || every {
		t.Fatalf("no file: %v %v, want no stall", d, every)
	}
	for _, c := range []struct {
		text  string
		shard int
		d     time.Duration
		every bool
	}{
		{"3 2s\n", 3, 2 * time.Second, false},
		{"3 200ms every\n", 3, 200 * time.Millisecond, true},
		{"3 200ms every\n", 4, 0, false},
		{"3 200ms always\n", 3, 0, false},
		{"3 -1s\n", 3, 0, false},
		{"3\n", 3, 0, false},
		{"3 1s every more\n", 3, 0, false},
	} {
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		d, every := stallFor(c.shard)
		if d != c.d || every != c.every {
			t.Errorf("%q, shard %d: %v %v, want %v %v", c.text, c.shard, d, every, c.d, c.every)
		}
		if faultStalls(c.shard) != (c.d > 0) {
			t.Errorf("%q, shard %d: faultStalls %v", c.text, c.shard, faultStalls(c.shard))
		}
	}
}
