// Package storetest is the conformance suite for segment.Store
// implementations. Every store (the embedded boltstore, mysqlstore, the
// in-memory memstore) runs the same checks, so the processors can rely on
// the contract rather than on one implementation:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) segment.Store {
//			s, err := boltstore.Open(t.TempDir(), boltstore.Options{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// newStore is called once per subtest and must register its own cleanup.
// Business names are unique per subtest, so stores backed by one shared
// database work too.
package storetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// timeout bounds every store call of the suite, so a hanging store fails the
// test instead of stalling it.
const timeout = 30 * time.Second

type suite struct {
	prefix string
	seq    atomic.Int64
}

// name returns a business name unique to this Run.
func (s *suite) name(label string) string {
	return fmt.Sprintf("st%s_%d_%s", s.prefix, s.seq.Add(1), label)
}

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) segment.Store) { run(t, newStore, false) }

// RunBiz runs only the business part of the suite, for stores that keep
// businesses but no counters (zkstore).
func RunBiz(t *testing.T, newStore func(t *testing.T) segment.Store) { run(t, newStore, true) }

func run(t *testing.T, newStore func(t *testing.T) segment.Store, bizOnly bool) {
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	s := &suite{prefix: hex.EncodeToString(rnd[:])}
	// biz marks the tests that need no counters: RunBiz runs only those.
	tests := []struct {
		name string
		fn   func(t *testing.T, st segment.Store)
		biz  bool
	}{
		{"CreateAndGet", s.testCreateAndGet, true},
		{"CreateDefaults", s.testCreateDefaults, true},
		{"CreateExists", s.testCreateExists, true},
		{"CreateInvalid", s.testCreateInvalid, true},
		{"Update", s.testUpdate, true},
		{"UpdateInvalid", s.testUpdateInvalid, true},
		{"UnknownBiz", s.testUnknownBiz, false}, // it reserves
		{"List", s.testList, true},
		{"OutputSettings", s.testOutputSettings, true},
		{"QuotaBurst", s.testQuotaBurst, true},
		{"OrderedMode", s.testOrderedMode, true},
		{"Channels", s.testChannels, true},
		{"TokensAddGetList", s.testTokensAddGetList, true},
		{"TokensLimits", s.testTokensLimits, true},
		{"TokensRevoke", s.testTokensRevoke, true},
		{"TokensAtCreate", s.testTokensAtCreate, true},
		{"TokensConcurrentAdd", s.testTokensConcurrentAdd, true},
		{"WrappedKey", s.testWrappedKey, true},
		{"SegmentContiguous", s.testSegmentContiguous, false},
		{"SegmentStartNum", s.testSegmentStartNum, false},
		{"SegmentInvalidStep", s.testSegmentInvalidStep, false},
		{"SegmentConcurrent", s.testSegmentConcurrent, false},
		{"OrderedSequence", s.testOrderedSequence, false},
		{"OrderedStartNum", s.testOrderedStartNum, false},
		{"OrderedInvalid", s.testOrderedInvalid, false},
		{"OrderedConcurrent", s.testOrderedConcurrent, false},
		{"OrderedIdempotent", s.testOrderedIdempotent, false},
		{"OrderedRequestMismatch", s.testOrderedRequestMismatch, false},
		{"OrderedRequestScopes", s.testOrderedRequestScopes, false},
		{"OrderedConcurrentRetries", s.testOrderedConcurrentRetries, false},
		{"OrderedAbove", s.testOrderedAbove, false},
		{"OrderedFence", s.testOrderedFence, false},
	}
	for _, tc := range tests {
		if bizOnly && !tc.biz {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return c
}

// create makes a business or fails the test.
func create(t *testing.T, st segment.Store, b segment.Biz) segment.Biz {
	t.Helper()
	got, err := st.CreateBiz(ctx(t), b)
	if err != nil {
		t.Fatalf("CreateBiz(%+v): %v", b, err)
	}
	return got
}

// wantErr fails unless err wraps target and, when field is set, names it.
func wantErr(t *testing.T, what string, err, target error, field string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one wrapping %q", what, err, target)
	}
	if field != "" && !strings.Contains(err.Error(), field) {
		t.Errorf("%s: error %q does not name the field %q", what, err, field)
	}
}

func ptr[T any](v T) *T { return &v }

// checkDisjointCover fails unless ranges are disjoint and together cover
// exactly first..first+total-1.
func checkDisjointCover(t *testing.T, what string, ranges []segment.Range, first int64) {
	t.Helper()
	sortRanges(ranges)
	next := first
	for _, r := range ranges {
		if r.First != next || r.Last < r.First {
			t.Fatalf("%s: range %d..%d, want one starting at %d (overlap or gap)", what, r.First, r.Last, next)
		}
		next = r.Last + 1
	}
}

func sortRanges(rs []segment.Range) {
	slices.SortFunc(rs, func(a, b segment.Range) int { return cmp.Compare(a.First, b.First) })
}
