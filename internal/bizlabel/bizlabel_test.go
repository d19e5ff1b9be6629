package bizlabel

import (
	"fmt"
	"sync"
	"testing"
)

// TestCap: the first Max names keep their label (also when seen again
// after the cap is reached), later ones are Other.
func TestCap(t *testing.T) {
	c := New(2)
	for _, tc := range []struct{ name, want string }{
		{"a", "a"}, {"b", "b"}, {"a", "a"}, {"c", Other}, {"b", "b"}, {"d", Other},
	} {
		if got := c.Label(tc.name); got != tc.want {
			t.Errorf("Label(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if New(0).Max() != DefaultMax {
		t.Error("New(0) does not use the default")
	}
}

// TestCapConcurrent: racing callers admit exactly Max names.
func TestCapConcurrent(t *testing.T) {
	c := New(10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	kept := map[string]bool{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				name := fmt.Sprintf("biz-%d", (i*7+g)%40)
				if l := c.Label(name); l != Other {
					mu.Lock()
					kept[l] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(kept) != 10 {
		t.Fatalf("%d names kept, want 10", len(kept))
	}
}

func BenchmarkLabelSeen(b *testing.B) {
	c := New(10)
	c.Label("orders")
	for b.Loop() {
		_ = c.Label("orders")
	}
}
