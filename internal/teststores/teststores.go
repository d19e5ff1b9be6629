// Package teststores lists the in-process segment.Store implementations
// (memstore, boltstore) that the processor tests of package segment and
// ordered/perrequest run on, so both run on the same ones.
package teststores

import (
	"context"
	"testing"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/boltstore"
	"github.com/idgen/idgen/segment/memstore"
)

// Store is one implementation: its name (for t.Run) and how to open a
// fresh, empty one that is closed when the test ends.
type Store struct {
	Name string
	Open func(t testing.TB) segment.Store
}

// All are the implementations.
var All = []Store{
	{"memstore", func(t testing.TB) segment.Store {
		s := memstore.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"boltstore", func(t testing.TB) segment.Store {
		s, err := boltstore.Open(t.TempDir(), boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
}

// MustCreate creates a business in st, failing the test if it cannot.
func MustCreate(t testing.TB, st segment.Store, b segment.Biz) segment.Biz {
	t.Helper()
	got, err := st.CreateBiz(context.Background(), b)
	if err != nil {
		t.Fatalf("CreateBiz: %v", err)
	}
	return got
}
