package server

import (
	"testing"

	orderedbolt "github.com/idgen/idgen/ordered/boltstore"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/boltstore"
	"github.com/idgen/idgen/segment/memstore"
)

// TestOrderedStore: the owners' store comes with the segment stores that
// have one (the bbolt file here; MySQL is the same switch, run by the
// cluster tests), and a store without one keeps ORDERED on the
// per-request path (orderedPath).
func TestOrderedStore(t *testing.T) {
	bs, err := boltstore.Open(t.TempDir(), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close() })
	if owned, ok := orderedStore(bs); !ok {
		t.Fatal("no owners' store for the bbolt store")
	} else if _, isBolt := owned.(*orderedbolt.Store); !isBolt {
		t.Fatalf("owners' store for the bbolt store is %T", owned)
	}
	if got := orderedPath(Config{}, bs, nil); got != orderedOwners {
		t.Fatalf("orderedPath(bbolt) = %d, want owners (%d)", got, orderedOwners)
	}

	var ms segment.Store = memstore.New()
	if owned, ok := orderedStore(ms); ok {
		t.Fatalf("orderedStore(memstore) = %T, want none", owned)
	}
	if got := orderedPath(Config{}, ms, nil); got != orderedPerRequestNoZK {
		t.Fatalf("orderedPath(memstore) = %d, want the per-request path (%d)", got, orderedPerRequestNoZK)
	}
}
