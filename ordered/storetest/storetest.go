// Package storetest is the conformance suite of ordered.Store: the rules
// the shard owners of package ordered rely on (fencing by epoch, rows that
// a persist only raises and a write-back sets, atomic request ids),
// checked the same way against every store:
//
//	func TestOwnedConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) ordered.Store {
//			s, err := boltstore.Open(t.TempDir(), boltstore.Options{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// open is called once per subtest and must register its own cleanup. The
// stores of one Run may share a database: every subtest works on shards
// no other subtest of the Run touches (epochs are per shard and never go
// down, so a shard is only fresh once) and on business names unique to the
// Run. So give each Run a database of its own.
//
// A store that holds the owners' leases (ordered.LeaseStore) runs the
// Lease cases with RunLease too.
//
// Each case fails when the rule it is named after breaks; run with -race.
// (ordered.Store's methods are each one atomic operation: Persist raises
// rows and stores request ids, WriteBack sets rows exactly, both fenced by
// the shard's epoch, which Claim raises.)
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// timeout bounds every store call of the suite, so a hanging store fails
// the test instead of stalling it.
const timeout = 30 * time.Second

type suite struct {
	open   func(t *testing.T) ordered.Store
	prefix string
	seq    atomic.Int64
	mu     sync.Mutex
	used   [segment.OrderedShards]bool // shards handed to subtests
}

// Run runs the conformance suite against stores made by open.
func Run(t *testing.T, open func(t *testing.T) ordered.Store) {
	s := newSuite(t, open)
	tests := []struct {
		name string
		fn   func(t *testing.T, st ordered.Store)
	}{
		{"ClaimRaisesEpoch", s.testClaimRaises},
		{"ClaimLowerFenced", s.testClaimLower},
		{"NeverClaimedFenced", s.testNeverClaimed},
		{"PersistStaleEpochFenced", s.testPersistStale},
		{"PersistEmptyChecksFence", s.testPersistEmpty},
		{"PersistRaisesOnly", s.testPersistRaises},
		{"WriteBackExact", s.testWriteBack},
		{"LoadOnlyExisting", s.testLoadOnlyExisting},
		{"LoadChecksEpoch", s.testLoadChecksEpoch},
		{"KeysAreExactBytes", s.testExactBytes},
		{"LargeBatches", s.testLargeBatches},
		{"DuplicateRequests", s.testDuplicateRequests},
		{"LookupRequests", s.testLookupRequests},
		{"RequestScopes", s.testRequestScopes},
		{"WrongShardRefused", s.testWrongShard},
		{"InvalidRefused", s.testInvalid},
		{"ConcurrentClaims", s.testConcurrentClaims},
		{"ConcurrentPersistsAndClaim", s.testConcurrentFence},
		{"PersistShardsFencedPartAlone", s.testShardsFenced},
		{"PersistShardsDuplicatesAlone", s.testShardsDuplicates},
		{"PersistShardsInvalid", s.testShardsInvalid},
		{"PersistShardsFencedBeforeDuplicate", s.testShardsFencedDuplicate},
		{"PersistShardsFencedAndDuplicateApart", s.testShardsFencedAndDuplicateApart},
		{"ConcurrentPersistShardsAndClaim", s.testShardsConcurrentFence},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, s.open(t))
		})
	}
}

func newSuite(t *testing.T, open func(t *testing.T) ordered.Store) *suite {
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	return &suite{open: open, prefix: hex.EncodeToString(rnd[:])}
}

// shard returns a shard no other subtest of this Run uses.
func (s *suite) shard(t *testing.T) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range s.used {
		if !s.used[n] && n != reservedShard {
			s.used[n] = true
			return n
		}
	}
	t.Fatalf("storetest: more than %d shards used in one Run", segment.OrderedShards)
	return 0
}

// reservedShard is kept for shardNumbered(48) (testExactBytes).
const reservedShard = 48

// shardNumbered returns shard n, which no other subtest of this Run uses.
func (s *suite) shardNumbered(t *testing.T, n int) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[n] {
		t.Fatalf("storetest: shard %d used twice in one Run", n)
	}
	s.used[n] = true
	return n
}

// biz returns a business name unique to this Run.
func (s *suite) biz(label string) string {
	return fmt.Sprintf("ost%s_%d_%s", s.prefix, s.seq.Add(1), label)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return c
}

// SubKeys returns n distinct sub keys of the shard (segment.Shard), each
// starting with prefix: the stores file rows by shard, so the suite and
// the stores' own tests need keys of a chosen shard.
func SubKeys(shard int, prefix string, n int) []string {
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if segment.Shard(k) == shard {
			out = append(out, k)
		}
	}
	return out
}

// Keys returns the keys of biz for subKeys.
func Keys(biz string, subKeys []string) []ordered.Key {
	out := make([]ordered.Key, len(subKeys))
	for i, sk := range subKeys {
		out[i] = ordered.Key{Biz: biz, SubKey: sk}
	}
	return out
}

// Req returns a well-formed request of count numbers ending at last.
func Req(biz, id, subKey string, last, count int64) ordered.Request {
	return ordered.Request{Biz: biz, ID: id, SubKey: subKey, Count: count,
		Range: segment.Range{First: last - count + 1, Last: last}}
}

// Scoped returns q in scope.
func Scoped(q ordered.Request, scope string) ordered.Request {
	q.Scope = scope
	return q
}

func claim(t *testing.T, st ordered.Store, shard int, epoch int64) {
	t.Helper()
	if err := st.Claim(ctx(t), shard, epoch, fmt.Sprintf("node-%d:8888", epoch)); err != nil {
		t.Fatalf("Claim(shard %d, epoch %d): %v", shard, epoch, err)
	}
}

func persist(t *testing.T, st ordered.Store, shard int, epoch int64, rows []ordered.Row, reqs []ordered.Request) {
	t.Helper()
	if err := st.Persist(ctx(t), shard, epoch, rows, reqs); err != nil {
		t.Fatalf("Persist(shard %d, epoch %d, %d rows, %d requests): %v", shard, epoch, len(rows), len(reqs), err)
	}
}

func load(t *testing.T, st ordered.Store, shard int, epoch int64, keys []ordered.Key) map[ordered.Key]int64 {
	t.Helper()
	m, err := st.Load(ctx(t), shard, epoch, keys)
	if err != nil {
		t.Fatalf("Load(shard %d, epoch %d, %d keys): %v", shard, epoch, len(keys), err)
	}
	return m
}

func lookup(t *testing.T, st ordered.Store, biz string, ids []string) map[string]ordered.Request {
	t.Helper()
	return lookupScoped(t, st, biz, "", ids)
}

func lookupScoped(t *testing.T, st ordered.Store, biz, scope string, ids []string) map[string]ordered.Request {
	t.Helper()
	m, err := st.LookupRequests(ctx(t), biz, scope, ids)
	if err != nil {
		t.Fatalf("LookupRequests(%q, scope %q, %d ids): %v", biz, scope, len(ids), err)
	}
	return m
}

// wantFenced fails unless err wraps ordered.ErrFenced (and nothing else
// the caller would act on differently).
func wantFenced(t *testing.T, what string, err error) {
	t.Helper()
	var dup *ordered.DuplicateRequestsError
	switch {
	case !errors.Is(err, ordered.ErrFenced):
		t.Fatalf("%s: error %v, want one wrapping ordered.ErrFenced", what, err)
	case errors.As(err, &dup), errors.Is(err, segment.ErrInvalid):
		t.Fatalf("%s: fenced error %v also reads as a duplicate or invalid input", what, err)
	}
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("%s: error %v, want one wrapping segment.ErrInvalid", what, err)
	}
	if errors.Is(err, ordered.ErrFenced) {
		t.Fatalf("%s: invalid input reported as fenced: %v", what, err)
	}
}

// wantRows fails unless Load under epoch returns exactly want for keys.
func wantRows(t *testing.T, what string, st ordered.Store, shard int, epoch int64, keys []ordered.Key, want map[ordered.Key]int64) {
	t.Helper()
	got := load(t, st, shard, epoch, keys)
	if !maps.Equal(got, want) {
		t.Fatalf("%s: Load = %v, want %v", what, got, want)
	}
}

func (s *suite) testClaimRaises(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("claim")
	k := Keys(biz, SubKeys(sh, "k", 1))[0]
	claim(t, st, sh, 3)
	claim(t, st, sh, 3) // a retried claim of the stored epoch succeeds
	persist(t, st, sh, 3, []ordered.Row{{Key: k, Num: 10}}, nil)
	claim(t, st, sh, 7)
	// The raise is recorded: the new epoch works, the old one is fenced.
	persist(t, st, sh, 7, []ordered.Row{{Key: k, Num: 11}}, nil)
	wantFenced(t, "Persist under the epoch before the claim", st.Persist(ctx(t), sh, 3, []ordered.Row{{Key: k, Num: 99}}, nil))
	_, err := st.Load(ctx(t), sh, 3, []ordered.Key{k})
	wantFenced(t, "Load under the epoch before the claim", err)
	wantRows(t, "after claims 3, 7", st, sh, 7, []ordered.Key{k}, map[ordered.Key]int64{k: 11})
}

func (s *suite) testClaimLower(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	k := Keys(s.biz("lower"), SubKeys(sh, "k", 1))[0]
	claim(t, st, sh, 5)
	persist(t, st, sh, 5, []ordered.Row{{Key: k, Num: 1}}, nil)
	wantFenced(t, "Claim of a lower epoch", st.Claim(ctx(t), sh, 4, "late-node:8888"))
	wantFenced(t, "Claim of epoch 0", st.Claim(ctx(t), sh, 0, "late-node:8888"))
	// The same epoch by another owner (two coordinators handing out
	// epochs for one store): each epoch has one claimer. The refusal
	// names the stored epoch, so a coordinator can move above it.
	err := st.Claim(ctx(t), sh, 5, "other-cluster:8888")
	wantFenced(t, "Claim of the stored epoch by another owner", err)
	var fe *ordered.FencedError
	if !errors.As(err, &fe) || fe.Stored != 5 {
		t.Fatalf("refused claim: %v, want a *ordered.FencedError with Stored 5", err)
	}
	// Nothing changed: 5 still persists, 4 never does.
	persist(t, st, sh, 5, []ordered.Row{{Key: k, Num: 2}}, nil)
	wantFenced(t, "Persist under the refused epoch", st.Persist(ctx(t), sh, 4, []ordered.Row{{Key: k, Num: 50}}, nil))
	wantRows(t, "after a refused claim", st, sh, 5, []ordered.Key{k}, map[ordered.Key]int64{k: 2})
}

func (s *suite) testNeverClaimed(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("never")
	k := Keys(biz, SubKeys(sh, "k", 1))[0]
	_, err := st.Load(ctx(t), sh, 0, []ordered.Key{k})
	wantFenced(t, "Load of a shard never claimed", err)
	wantFenced(t, "Persist to a shard never claimed",
		st.Persist(ctx(t), sh, 0, []ordered.Row{{Key: k, Num: 5}}, []ordered.Request{Req(biz, "r1", k.SubKey, 5, 1)}))
	wantFenced(t, "empty Persist to a shard never claimed", st.Persist(ctx(t), sh, 0, nil, nil))
	wantFenced(t, "WriteBack to a shard never claimed", st.WriteBack(ctx(t), sh, 0, []ordered.Row{{Key: k, Num: 5}}))
	claim(t, st, sh, 0)
	wantRows(t, "after fenced persists", st, sh, 0, []ordered.Key{k}, map[ordered.Key]int64{})
	if m := lookup(t, st, biz, []string{"r1"}); len(m) != 0 {
		t.Fatalf("a fenced Persist stored request ids: %v", m)
	}
}

func (s *suite) testPersistStale(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("stale")
	sks := SubKeys(sh, "k", 2)
	k1, k2 := ordered.Key{Biz: biz, SubKey: sks[0]}, ordered.Key{Biz: biz, SubKey: sks[1]}
	claim(t, st, sh, 1)
	persist(t, st, sh, 1, []ordered.Row{{Key: k1, Num: 10}}, []ordered.Request{Req(biz, "a", k1.SubKey, 10, 2)})
	claim(t, st, sh, 2)
	err := st.Persist(ctx(t), sh, 1,
		[]ordered.Row{{Key: k1, Num: 20}, {Key: k2, Num: 7}},
		[]ordered.Request{Req(biz, "b", k1.SubKey, 20, 1), Req(biz, "c", k2.SubKey, 7, 7)})
	wantFenced(t, "Persist with the epoch before a newer claim", err)
	wantRows(t, "after a fenced persist", st, sh, 2, []ordered.Key{k1, k2}, map[ordered.Key]int64{k1: 10})
	got := lookup(t, st, biz, []string{"a", "b", "c"})
	if len(got) != 1 || got["a"].Range.Last != 10 {
		t.Fatalf("requests after a fenced persist: %v, want only a (stored before the claim)", got)
	}
	// The new owner persists; the old one stays fenced.
	persist(t, st, sh, 2, []ordered.Row{{Key: k1, Num: 11}}, nil)
	wantFenced(t, "second stale Persist", st.Persist(ctx(t), sh, 1, []ordered.Row{{Key: k1, Num: 30}}, nil))
	wantRows(t, "after the new owner's persist", st, sh, 2, []ordered.Key{k1}, map[ordered.Key]int64{k1: 11})
}

func (s *suite) testPersistEmpty(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	claim(t, st, sh, 4)
	persist(t, st, sh, 4, nil, nil)
	persist(t, st, sh, 4, []ordered.Row{}, []ordered.Request{})
	wantFenced(t, "empty Persist under another epoch", st.Persist(ctx(t), sh, 5, nil, nil))
	claim(t, st, sh, 6)
	wantFenced(t, "empty Persist under the old epoch", st.Persist(ctx(t), sh, 4, nil, nil))
	persist(t, st, sh, 6, nil, nil)
}

func (s *suite) testPersistRaises(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("raise")
	keys := Keys(biz, SubKeys(sh, "k", 3))
	claim(t, st, sh, 1)
	persist(t, st, sh, 1, []ordered.Row{{Key: keys[0], Num: 100}, {Key: keys[1], Num: 5}}, nil)
	wantRows(t, "created", st, sh, 1, keys, map[ordered.Key]int64{keys[0]: 100, keys[1]: 5})
	// A lower number leaves the row (persists of a shard may commit in
	// any order), a higher one raises it, a missing row is created.
	persist(t, st, sh, 1, []ordered.Row{{Key: keys[0], Num: 42}, {Key: keys[1], Num: 6}, {Key: keys[2], Num: 0}}, nil)
	wantRows(t, "lower kept, higher raised, missing created", st, sh, 1, keys, map[ordered.Key]int64{keys[0]: 100, keys[1]: 6, keys[2]: 0})
	persist(t, st, sh, 1, []ordered.Row{{Key: keys[1], Num: 6}}, nil) // equal: no change
	// Rows survive a change of owner as they are.
	claim(t, st, sh, 2)
	wantRows(t, "under the next owner", st, sh, 2, keys, map[ordered.Key]int64{keys[0]: 100, keys[1]: 6, keys[2]: 0})
}

func (s *suite) testWriteBack(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("wb")
	keys := Keys(biz, SubKeys(sh, "k", 3))
	claim(t, st, sh, 1)
	persist(t, st, sh, 1, []ordered.Row{{Key: keys[0], Num: 100}, {Key: keys[1], Num: 5}}, nil)
	// Exact: lowers, raises, creates.
	if err := st.WriteBack(ctx(t), sh, 1, []ordered.Row{{Key: keys[0], Num: 42}, {Key: keys[1], Num: 9}, {Key: keys[2], Num: 3}}); err != nil {
		t.Fatalf("WriteBack: %v", err)
	}
	wantRows(t, "after WriteBack", st, sh, 1, keys, map[ordered.Key]int64{keys[0]: 42, keys[1]: 9, keys[2]: 3})
	if err := st.WriteBack(ctx(t), sh, 1, nil); err != nil {
		t.Fatalf("WriteBack of no rows under the stored epoch: %v", err)
	}
	// Fenced: a deposed owner's write-back changes nothing.
	claim(t, st, sh, 2)
	wantFenced(t, "WriteBack under the old epoch",
		st.WriteBack(ctx(t), sh, 1, []ordered.Row{{Key: keys[0], Num: 1}, {Key: keys[1], Num: 1}}))
	wantFenced(t, "WriteBack of no rows under the old epoch", st.WriteBack(ctx(t), sh, 1, nil))
	wantFenced(t, "WriteBack under an epoch never claimed", st.WriteBack(ctx(t), sh, 3, []ordered.Row{{Key: keys[0], Num: 1}}))
	wantRows(t, "after fenced write-backs", st, sh, 2, keys, map[ordered.Key]int64{keys[0]: 42, keys[1]: 9, keys[2]: 3})
	// Refused input writes nothing.
	other := ordered.Key{Biz: biz, SubKey: SubKeys((sh+1)%segment.OrderedShards, "k", 1)[0]}
	wantInvalid(t, "WriteBack of a row of another shard",
		st.WriteBack(ctx(t), sh, 2, []ordered.Row{{Key: keys[0], Num: 7}, {Key: other, Num: 7}}))
	wantInvalid(t, "WriteBack of a negative number", st.WriteBack(ctx(t), sh, 2, []ordered.Row{{Key: keys[0], Num: 7}, {Key: keys[1], Num: -1}}))
	wantInvalid(t, "WriteBack of a key twice", st.WriteBack(ctx(t), sh, 2, []ordered.Row{{Key: keys[0], Num: 7}, {Key: keys[0], Num: 8}}))
	wantInvalid(t, "WriteBack of shard 64", st.WriteBack(ctx(t), segment.OrderedShards, 2, nil))
	wantRows(t, "after refused write-backs", st, sh, 2, keys, map[ordered.Key]int64{keys[0]: 42, keys[1]: 9, keys[2]: 3})
}

func (s *suite) testLoadOnlyExisting(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz, other := s.biz("load"), s.biz("other")
	sks := SubKeys(sh, "订单-", 4) // multi-byte sub keys round-trip too
	claim(t, st, sh, 9)
	persist(t, st, sh, 9, []ordered.Row{
		{Key: ordered.Key{Biz: biz, SubKey: sks[0]}, Num: 3},
		{Key: ordered.Key{Biz: biz, SubKey: sks[2]}, Num: 8},
		{Key: ordered.Key{Biz: other, SubKey: sks[1]}, Num: 77},
	}, nil)
	keys := Keys(biz, sks)
	wantRows(t, "two of four keys stored", st, sh, 9, keys, map[ordered.Key]int64{keys[0]: 3, keys[2]: 8})
	wantRows(t, "no keys", st, sh, 9, nil, map[ordered.Key]int64{})
	wantRows(t, "a key asked twice", st, sh, 9, []ordered.Key{keys[2], keys[2]}, map[ordered.Key]int64{keys[2]: 8})
	ok := ordered.Key{Biz: other, SubKey: sks[1]}
	wantRows(t, "the other business", st, sh, 9, Keys(other, sks), map[ordered.Key]int64{ok: 77})
}

func (s *suite) testLoadChecksEpoch(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	k := Keys(s.biz("lepoch"), SubKeys(sh, "k", 1))[0]
	claim(t, st, sh, 10)
	persist(t, st, sh, 10, []ordered.Row{{Key: k, Num: 1}}, nil)
	for _, e := range []int64{9, 11} {
		_, err := st.Load(ctx(t), sh, e, []ordered.Key{k})
		wantFenced(t, fmt.Sprintf("Load under epoch %d (stored 10)", e), err)
		_, err = st.Load(ctx(t), sh, e, nil)
		wantFenced(t, fmt.Sprintf("Load of no keys under epoch %d (stored 10)", e), err)
	}
	wantRows(t, "under the stored epoch", st, sh, 10, []ordered.Key{k}, map[ordered.Key]int64{k: 1})
}

// testExactBytes: keys are compared byte for byte ('aB' and 'Ab', 'k' and
// 'k ' are different keys), as the per-request path compares them (a
// case-insensitive or PAD SPACE collation would merge them). Both keys of a
// pair must share a shard to meet in one table: "aB" and "Ab" hash 64·15
// apart, and s and s+" " share one only in shards 16 and 48 (31h+32 ≡ h mod
// 64), so the test takes shard 48.
func (s *suite) testExactBytes(t *testing.T, st ordered.Store) {
	sh := s.shardNumbered(t, 48)
	biz := s.biz("bytes")
	var pairs [][2]string
	for i := 0; i < 1_000_000 && len(pairs) < 2; i++ {
		if a, b := fmt.Sprintf("k%daB", i), fmt.Sprintf("k%dAb", i); len(pairs) == 0 && segment.Shard(a) == sh && segment.Shard(b) == sh {
			pairs = append(pairs, [2]string{a, b})
		}
		if a := fmt.Sprintf("k%d", i); len(pairs) == 1 && segment.Shard(a) == sh && segment.Shard(a+" ") == sh {
			pairs = append(pairs, [2]string{a, a + " "})
		}
	}
	if len(pairs) < 2 {
		t.Fatalf("storetest: found no key pairs of shard %d", sh)
	}
	claim(t, st, sh, 1)
	for i, p := range pairs {
		a, b := ordered.Key{Biz: biz, SubKey: p[0]}, ordered.Key{Biz: biz, SubKey: p[1]}
		persist(t, st, sh, 1, []ordered.Row{{Key: a, Num: int64(10 + i)}, {Key: b, Num: int64(20 + i)}},
			[]ordered.Request{Req(biz, p[0], p[0], int64(10+i), 1), Req(biz, p[1], p[1], int64(20+i), 1)})
		wantRows(t, fmt.Sprintf("%q and %q", p[0], p[1]), st, sh, 1, []ordered.Key{a, b},
			map[ordered.Key]int64{a: int64(10 + i), b: int64(20 + i)})
		if got := lookup(t, st, biz, []string{p[0], p[1]}); got[p[0]].SubKey != p[0] || got[p[1]].SubKey != p[1] {
			t.Fatalf("request ids %q and %q: %+v", p[0], p[1], got)
		}
	}
}

// testLargeBatches: one persist and one load of more keys and request ids
// than a store's statement batch (500 in mysqlstore) stay one atomic call.
func (s *suite) testLargeBatches(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("large")
	const n = 1201
	sks := SubKeys(sh, "k", n)
	keys := Keys(biz, sks)
	rows := make([]ordered.Row, n)
	reqs := make([]ordered.Request, n)
	ids := make([]string, n)
	want := map[ordered.Key]int64{}
	for i, k := range keys {
		rows[i] = ordered.Row{Key: k, Num: int64(1000 + i)}
		ids[i] = fmt.Sprintf("req-%d", i)
		reqs[i] = Req(biz, ids[i], k.SubKey, int64(1000+i), 1)
		want[k] = int64(1000 + i)
	}
	claim(t, st, sh, 1)
	persist(t, st, sh, 1, rows, reqs)
	wantRows(t, "1201 rows", st, sh, 1, keys, want)
	if got := lookup(t, st, biz, ids); len(got) != n {
		t.Fatalf("LookupRequests of %d stored ids found %d", n, len(got))
	}
	// A duplicate in the last batch refuses the whole call: the first
	// batches (rows and ids) are not written either.
	for i := range rows {
		rows[i].Num += 5000
		ids[i] = fmt.Sprintf("again-%d", i)
		reqs[i] = Req(biz, ids[i], keys[i].SubKey, rows[i].Num, 1)
	}
	reqs[n-1] = Req(biz, "req-0", keys[n-1].SubKey, rows[n-1].Num, 1)
	err := st.Persist(ctx(t), sh, 1, rows, reqs)
	var dup *ordered.DuplicateRequestsError
	if !errors.As(err, &dup) || len(dup.Requests) != 1 || dup.Requests[0] != (ordered.RequestKey{Biz: biz, ID: "req-0"}) {
		t.Fatalf("Persist with one stored id among %d: %v, want a DuplicateRequestsError naming req-0", n, err)
	}
	wantRows(t, "after a refused large persist", st, sh, 1, keys, want)
	if got := lookup(t, st, biz, ids[:n-1]); len(got) != 0 {
		t.Fatalf("a refused large persist stored %d request ids", len(got))
	}
	// A large write-back sets every row, in every statement batch.
	for i := range rows {
		rows[i].Num = int64(i)
		want[keys[i]] = int64(i)
	}
	if err := st.WriteBack(ctx(t), sh, 1, rows); err != nil {
		t.Fatalf("WriteBack of %d rows: %v", n, err)
	}
	wantRows(t, "after a large write-back", st, sh, 1, keys, want)
}

func (s *suite) testDuplicateRequests(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz, other := s.biz("dup"), s.biz("dupother")
	sks := SubKeys(sh, "k", 2)
	k1, k2 := ordered.Key{Biz: biz, SubKey: sks[0]}, ordered.Key{Biz: biz, SubKey: sks[1]}
	claim(t, st, sh, 1)
	persist(t, st, sh, 1, []ordered.Row{{Key: k1, Num: 2}},
		[]ordered.Request{Req(biz, "a", k1.SubKey, 1, 1), Req(biz, "b", k1.SubKey, 2, 1)})

	err := st.Persist(ctx(t), sh, 1,
		[]ordered.Row{{Key: k1, Num: 9}, {Key: k2, Num: 4}},
		[]ordered.Request{
			Req(biz, "b", k1.SubKey, 3, 1),   // stored
			Req(biz, "c", k1.SubKey, 9, 6),   // new
			Req(biz, "a", k2.SubKey, 1, 1),   // stored (for another key: still the id)
			Req(biz, "d", k2.SubKey, 4, 3),   // new
			Req(other, "a", k2.SubKey, 4, 1), // new: ids are per business
		})
	var dup *ordered.DuplicateRequestsError
	if !errors.As(err, &dup) {
		t.Fatalf("Persist with stored request ids: %v, want *ordered.DuplicateRequestsError", err)
	}
	if errors.Is(err, ordered.ErrFenced) || errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("duplicate error %v also reads as fenced or invalid", err)
	}
	got := slices.Clone(dup.Requests)
	slices.SortFunc(got, func(a, b ordered.RequestKey) int { return strings.Compare(a.Biz+"\x00"+a.ID, b.Biz+"\x00"+b.ID) })
	want := []ordered.RequestKey{{Biz: biz, ID: "a"}, {Biz: biz, ID: "b"}}
	if !slices.Equal(got, want) {
		t.Fatalf("duplicates named %v, want exactly %v", dup.Requests, want)
	}
	// Nothing of the batch was written: rows as before, new ids absent,
	// stored ids unchanged.
	wantRows(t, "after a refused batch", st, sh, 1, []ordered.Key{k1, k2}, map[ordered.Key]int64{k1: 2})
	if m := lookup(t, st, biz, []string{"c", "d"}); len(m) != 0 {
		t.Fatalf("refused batch stored %v", m)
	}
	if m := lookup(t, st, other, []string{"a"}); len(m) != 0 {
		t.Fatalf("refused batch stored %v", m)
	}
	if m := lookup(t, st, biz, []string{"a", "b"}); m["a"].Range != (segment.Range{First: 1, Last: 1}) ||
		m["b"].Range != (segment.Range{First: 2, Last: 2}) || m["a"].SubKey != k1.SubKey {
		t.Fatalf("stored requests changed by a refused batch: %v", m)
	}
	// The rest of the batch goes through on its own.
	persist(t, st, sh, 1, []ordered.Row{{Key: k1, Num: 9}, {Key: k2, Num: 4}},
		[]ordered.Request{Req(biz, "c", k1.SubKey, 9, 6), Req(biz, "d", k2.SubKey, 4, 3), Req(other, "a", k2.SubKey, 4, 1)})
	wantRows(t, "after the retry", st, sh, 1, []ordered.Key{k1, k2}, map[ordered.Key]int64{k1: 9, k2: 4})
}

func (s *suite) testLookupRequests(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz, other := s.biz("lookup"), s.biz("lookupother")
	sks := SubKeys(sh, "键", 2)
	claim(t, st, sh, 1)
	r1 := Req(biz, "r-1", sks[0], 10, 10)
	r2 := Req(biz, "R-1", sks[1], 25, 3) // ids are exact bytes too
	r3 := Req(other, "r-1", sks[1], 7, 7)
	persist(t, st, sh, 1, nil, []ordered.Request{r1, r2, r3})
	got := lookup(t, st, biz, []string{"r-1", "R-1", "missing", "r-1 "})
	want := map[string]ordered.Request{"r-1": r1, "R-1": r2}
	if !maps.Equal(got, want) {
		t.Fatalf("LookupRequests = %+v, want %+v", got, want)
	}
	if got := lookup(t, st, other, []string{"r-1", "R-1"}); !maps.Equal(got, map[string]ordered.Request{"r-1": r3}) {
		t.Fatalf("LookupRequests of the other business = %+v, want only %+v", got, r3)
	}
	if got := lookup(t, st, biz, nil); len(got) != 0 {
		t.Fatalf("LookupRequests of no ids = %v", got)
	}
	if got := lookup(t, st, s.biz("nobody"), []string{"r-1"}); len(got) != 0 {
		t.Fatalf("LookupRequests of a business with no requests = %v", got)
	}
}

// testRequestScopes: a request id is stored per (business, scope, id):
// callers of one business with different credentials never meet, so a
// second caller reusing an id neither finds the first's request nor makes
// the first's use of the id a duplicate.
func (s *suite) testRequestScopes(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("scopes")
	sks := SubKeys(sh, "k", 2)
	claim(t, st, sh, 1)
	unscoped := Req(biz, "r", sks[0], 10, 10)
	victim := Scoped(Req(biz, "r", sks[0], 13, 3), "0123456789abcdef")
	// The same id in two scopes, in one persist: two requests.
	persist(t, st, sh, 1, nil, []ordered.Request{unscoped, victim})
	if got := lookupScoped(t, st, biz, victim.Scope, []string{"r"}); !maps.Equal(got, map[string]ordered.Request{"r": victim}) {
		t.Fatalf("LookupRequests in the victim's scope = %+v, want %+v", got, victim)
	}
	if got := lookup(t, st, biz, []string{"r"}); !maps.Equal(got, map[string]ordered.Request{"r": unscoped}) {
		t.Fatalf("LookupRequests without a scope = %+v, want only %+v", got, unscoped)
	}
	if got := lookupScoped(t, st, biz, "fedcba9876543210", []string{"r"}); len(got) != 0 {
		t.Fatalf("LookupRequests in a third scope = %+v: another caller's request", got)
	}
	// A third caller's use of the id is its own, and stored.
	third := Scoped(Req(biz, "r", sks[1], 4, 4), "fedcba9876543210")
	persist(t, st, sh, 1, nil, []ordered.Request{third})
	// The victim's retry is a duplicate of its own request only.
	err := st.Persist(ctx(t), sh, 1, nil, []ordered.Request{Scoped(Req(biz, "r", sks[0], 20, 3), victim.Scope)})
	var dup *ordered.DuplicateRequestsError
	if !errors.As(err, &dup) || len(dup.Requests) != 1 || dup.Requests[0] != (ordered.RequestKey{Biz: biz, Scope: victim.Scope, ID: "r"}) {
		t.Fatalf("victim's retry: %v, want a DuplicateRequestsError naming (%q, %q, r)", err, biz, victim.Scope)
	}
	if got := lookupScoped(t, st, biz, third.Scope, []string{"r"}); !maps.Equal(got, map[string]ordered.Request{"r": third}) {
		t.Fatalf("LookupRequests in the third scope = %+v, want %+v", got, third)
	}
}

func (s *suite) testWrongShard(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("wrong")
	mine := ordered.Key{Biz: biz, SubKey: SubKeys(sh, "k", 1)[0]}
	theirs := ordered.Key{Biz: biz, SubKey: SubKeys((sh+1)%segment.OrderedShards, "k", 1)[0]}
	claim(t, st, sh, 1)
	wantInvalid(t, "Persist of a row of another shard",
		st.Persist(ctx(t), sh, 1, []ordered.Row{{Key: mine, Num: 5}, {Key: theirs, Num: 5}}, nil))
	wantInvalid(t, "Persist of a request of another shard",
		st.Persist(ctx(t), sh, 1, []ordered.Row{{Key: mine, Num: 5}}, []ordered.Request{Req(biz, "x", theirs.SubKey, 5, 1)}))
	_, err := st.Load(ctx(t), sh, 1, []ordered.Key{mine, theirs})
	wantInvalid(t, "Load of a key of another shard", err)
	wantRows(t, "after refused persists", st, sh, 1, []ordered.Key{mine}, map[ordered.Key]int64{})
	if m := lookup(t, st, biz, []string{"x"}); len(m) != 0 {
		t.Fatalf("a refused persist stored %v", m)
	}
}

func (s *suite) testInvalid(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("invalid")
	sks := SubKeys(sh, "k", 1)
	k := ordered.Key{Biz: biz, SubKey: sks[0]}
	claim(t, st, sh, 1)
	for _, bad := range []int{-1, segment.OrderedShards} {
		wantInvalid(t, fmt.Sprintf("Claim of shard %d", bad), st.Claim(ctx(t), bad, 1, "n"))
		_, err := st.Load(ctx(t), bad, 1, nil)
		wantInvalid(t, fmt.Sprintf("Load of shard %d", bad), err)
		wantInvalid(t, fmt.Sprintf("Persist of shard %d", bad), st.Persist(ctx(t), bad, 1, nil, nil))
	}
	wantInvalid(t, "Claim of a negative epoch", st.Claim(ctx(t), sh, -1, "n"))
	long := strings.Repeat("x", segment.MaxSubKeyLen+1)
	badSub := "\xff\xfe"
	good := Req(biz, "ok", k.SubKey, 5, 1)
	for _, tc := range []struct {
		name string
		rows []ordered.Row
		reqs []ordered.Request
	}{
		{"negative number", []ordered.Row{{Key: k, Num: -1}}, nil},
		{"bad business name", []ordered.Row{{Key: ordered.Key{Biz: "no spaces allowed", SubKey: k.SubKey}, Num: 1}}, nil},
		{"empty business name", []ordered.Row{{Key: ordered.Key{SubKey: k.SubKey}, Num: 1}}, nil},
		{"sub key not UTF-8", []ordered.Row{{Key: ordered.Key{Biz: biz, SubKey: badSub}, Num: 1}}, nil},
		{"sub key too long", []ordered.Row{{Key: ordered.Key{Biz: biz, SubKey: long}, Num: 1}}, nil},
		{"a key twice", []ordered.Row{{Key: k, Num: 1}, {Key: k, Num: 2}}, nil},
		{"empty request id", nil, []ordered.Request{Req(biz, "", k.SubKey, 5, 1)}},
		{"request id too long", nil, []ordered.Request{Req(biz, strings.Repeat("r", segment.MaxRequestIDLen+1), k.SubKey, 5, 1)}},
		{"request count zero", nil, []ordered.Request{{Biz: biz, ID: "z", SubKey: k.SubKey, Range: segment.Range{First: 1, Last: 1}}}},
		{"request range not its count", nil, []ordered.Request{{Biz: biz, ID: "z", SubKey: k.SubKey, Count: 2, Range: segment.Range{First: 1, Last: 5}}}},
		{"request range from 0", nil, []ordered.Request{{Biz: biz, ID: "z", SubKey: k.SubKey, Count: 1, Range: segment.Range{First: 0, Last: 0}}}},
		{"request id twice", nil, []ordered.Request{good, good}},
		{"request bad business", nil, []ordered.Request{Req("", "z", k.SubKey, 5, 1)}},
		{"request id beginning with NUL", nil, []ordered.Request{Req(biz, "\x00s\x00z", k.SubKey, 5, 1)}},
		{"request scope malformed", nil, []ordered.Request{Scoped(Req(biz, "z", k.SubKey, 5, 1), "a\x00b")}},
		{"request scope too long", nil, []ordered.Request{Scoped(Req(biz, "z", k.SubKey, 5, 1), strings.Repeat("s", segment.MaxRequestScopeLen+1))}},
	} {
		rows := tc.rows
		if rows == nil {
			// A valid row beside the bad request: not written either.
			rows = []ordered.Row{{Key: k, Num: 1000}}
		}
		wantInvalid(t, "Persist with "+tc.name, st.Persist(ctx(t), sh, 1, rows, tc.reqs))
	}
	_, err := st.Load(ctx(t), sh, 1, []ordered.Key{{Biz: biz, SubKey: badSub}})
	wantInvalid(t, "Load of a sub key that is not UTF-8", err)
	_, err = st.LookupRequests(ctx(t), "", "", []string{"x"})
	wantInvalid(t, "LookupRequests of an empty business name", err)
	_, err = st.LookupRequests(ctx(t), biz, "bad scope", []string{"x"})
	wantInvalid(t, "LookupRequests of a malformed scope", err)
	wantRows(t, "after refused persists", st, sh, 1, []ordered.Key{k}, map[ordered.Key]int64{})
	if m := lookup(t, st, biz, []string{"ok", "z"}); len(m) != 0 {
		t.Fatalf("refused persists stored %v", m)
	}
}

// testConcurrentClaims: claims of many epochs at once, on a shard that has
// no row yet (its first claims race to create it), leave the highest.
func (s *suite) testConcurrentClaims(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	k := Keys(s.biz("cclaim"), SubKeys(sh, "k", 1))[0]
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for e := int64(1); e <= n; e++ {
		wg.Go(func() { errs[e] = st.Claim(ctx(t), sh, e, fmt.Sprintf("node-%d:8888", e)) })
	}
	wg.Wait()
	for e, err := range errs[1:] {
		if err != nil && !errors.Is(err, ordered.ErrFenced) {
			t.Fatalf("concurrent Claim of epoch %d: %v, want nil or ErrFenced", e+1, err)
		}
	}
	if errs[n] != nil {
		t.Fatalf("Claim of the highest epoch %d failed: %v", n, errs[n])
	}
	persist(t, st, sh, n, []ordered.Row{{Key: k, Num: 1}}, nil)
	wantFenced(t, "Persist under the second highest epoch", st.Persist(ctx(t), sh, n-1, nil, nil))
}

// testConcurrentFence is the fencing rule under load: goroutines persist
// (odd ones write back) under epoch e while another Claims e+1. A write
// that starts after the Claim returned must be fenced, a fenced one must
// have written nothing, and the next owner, loading right after its
// claim, reads exactly the last successful write of each key. A store
// whose fence does not hold the shard across a write (a check, then the
// write) loses this race only now and then, so the rounds repeat it.
func (s *suite) testConcurrentFence(t *testing.T, st ordered.Store) {
	sh := s.shard(t)
	biz := s.biz("fence")
	const rounds = 10
	keys := Keys(biz, SubKeys(sh, "k", fenceWriters))
	shadow := Keys(biz+"x", SubKeys(sh, "k", fenceWriters))
	claim(t, st, sh, 1)
	last := make([]int64, fenceWriters)
	for e := int64(1); e <= rounds; e++ {
		fenceRound(t, st, sh, e, biz, keys, shadow, last)
	}
}

const fenceWriters = 8

// fenceRound runs one round of testConcurrentFence: writers under epoch e
// (claimed), a Claim of e+1 in the middle. last holds each writer's last
// successful number, carried across rounds.
func fenceRound(t *testing.T, st ordered.Store, sh int, e int64, biz string, keys, shadow []ordered.Key, last []int64) {
	t.Helper()
	const (
		beforeClaim = 5 // writes of each writer before the claim
		afterClaim  = 3 // writes of each writer started after the claim returned
	)
	type result struct {
		okIDs, fencedIDs  []string
		lateSuccess, errs []string
	}
	results := make([]result, fenceWriters)
	var (
		ready   sync.WaitGroup
		wg      sync.WaitGroup
		claimed atomic.Bool // set once Claim(e+1) returned
	)
	ready.Add(fenceWriters)
	for g := range fenceWriters {
		wg.Go(func() {
			var once sync.Once
			defer once.Do(ready.Done)
			res := &results[g]
			late := 0
			for n := 1; late < afterClaim && len(res.errs) == 0; n++ {
				after := claimed.Load()
				if after {
					late++
				}
				v := last[g] + 1 + int64(n) // above everything of earlier rounds
				id := fmt.Sprintf("w%d-%d", g, v)
				// Every write also carries a second row only this writer
				// writes: a fenced write must write neither row.
				rows := []ordered.Row{{Key: keys[g], Num: v}, {Key: shadow[g], Num: v}}
				var (
					err  error
					reqs []ordered.Request
				)
				if g%2 == 1 {
					err = st.WriteBack(ctx(t), sh, e, rows)
				} else {
					reqs = []ordered.Request{Req(biz, id, keys[g].SubKey, v, 1)}
					err = st.Persist(ctx(t), sh, e, rows, reqs)
				}
				switch {
				case err == nil:
					last[g] = v
					if reqs != nil {
						res.okIDs = append(res.okIDs, id)
					}
					if after {
						res.lateSuccess = append(res.lateSuccess, id)
					}
				case errors.Is(err, ordered.ErrFenced):
					if reqs != nil {
						res.fencedIDs = append(res.fencedIDs, id)
					}
				default:
					res.errs = append(res.errs, err.Error())
				}
				if n >= beforeClaim {
					once.Do(ready.Done)
				}
			}
		})
	}
	ready.Wait()
	claim(t, st, sh, e+1)
	claimed.Store(true)
	// The new owner loads at once, while the old one's writes still run
	// (and must all be fenced from now on).
	all := slices.Concat(keys, shadow)
	early := load(t, st, sh, e+1, all)
	wg.Wait()

	want := map[ordered.Key]int64{}
	var okIDs, fencedIDs []string
	for g, res := range results {
		if len(res.errs) > 0 {
			t.Fatalf("round %d, writer %d: a write failed other than fenced: %v", e, g, res.errs)
		}
		if len(res.lateSuccess) > 0 {
			t.Fatalf("round %d, writer %d: writes %v under epoch %d succeeded though they started after Claim(%d) returned",
				e, g, res.lateSuccess, e, e+1)
		}
		want[keys[g]] = last[g]
		want[shadow[g]] = last[g]
		okIDs = append(okIDs, res.okIDs...)
		fencedIDs = append(fencedIDs, res.fencedIDs...)
	}
	if !maps.Equal(early, want) {
		t.Fatalf("round %d: the new owner loaded %v right after Claim(%d), but the last successful writes under epoch %d were %v",
			e, early, e+1, e, want)
	}
	wantRows(t, fmt.Sprintf("round %d: the new owner's load after the old owner stopped", e), st, sh, e+1, all, want)
	wantStored(t, fmt.Sprintf("round %d", e), st, biz, okIDs, fencedIDs)
	_, err := st.Load(ctx(t), sh, e, keys)
	wantFenced(t, fmt.Sprintf("round %d: Load under the deposed epoch", e), err)
}

// persistShards runs PersistShards and fails the test on a whole-call error.
func persistShards(t *testing.T, st ordered.Store, parts []ordered.ShardWrite) []error {
	t.Helper()
	errs, err := st.PersistShards(ctx(t), parts)
	if err != nil {
		t.Fatalf("PersistShards(%d parts): %v", len(parts), err)
	}
	if len(errs) != len(parts) {
		t.Fatalf("PersistShards(%d parts) returned %d errors", len(parts), len(errs))
	}
	return errs
}

// testShardsFenced is the group commit's fencing rule: a part whose shard
// has a newer owner (or a lost claim, or none) fails alone, writes
// nothing (neither rows nor request ids), and the parts around it in the
// same transaction commit.
func (s *suite) testShardsFenced(t *testing.T, st ordered.Store) {
	a, b, c, lower, never := s.shard(t), s.shard(t), s.shard(t), s.shard(t), s.shard(t)
	biz := s.biz("grpfence")
	key := func(sh int) ordered.Key { return ordered.Key{Biz: biz, SubKey: SubKeys(sh, "k", 1)[0]} }
	for _, sh := range []int{a, b, c} {
		claim(t, st, sh, 1)
	}
	claim(t, st, b, 2) // b's new owner
	claim(t, st, lower, 1)
	part := func(sh int, epoch, num int64, id string) ordered.ShardWrite {
		k := key(sh)
		return ordered.ShardWrite{Shard: sh, Epoch: epoch, Rows: []ordered.Row{{Key: k, Num: num}},
			Reqs: []ordered.Request{Req(biz, id, k.SubKey, num, 1)}}
	}
	errs := persistShards(t, st, []ordered.ShardWrite{
		part(a, 1, 5, "a"),
		part(b, 1, 6, "b"),         // deposed: b is at epoch 2
		part(c, 1, 7, "c"),         // fine
		part(lower, 2, 8, "lower"), // a claim of epoch 2 that the store lost
		part(never, 1, 9, "never"), // never claimed
	})
	for i, name := range []string{"a", "b", "c", "lower", "never"} {
		switch name {
		case "a", "c":
			if errs[i] != nil {
				t.Fatalf("part %s beside fenced parts: %v, want committed", name, errs[i])
			}
		default:
			wantFenced(t, "part "+name, errs[i])
		}
	}
	wantRows(t, "shard a", st, a, 1, []ordered.Key{key(a)}, map[ordered.Key]int64{key(a): 5})
	wantRows(t, "shard c", st, c, 1, []ordered.Key{key(c)}, map[ordered.Key]int64{key(c): 7})
	wantRows(t, "fenced shard b (its new owner's load)", st, b, 2, []ordered.Key{key(b)}, map[ordered.Key]int64{})
	wantRows(t, "fenced shard lower", st, lower, 1, []ordered.Key{key(lower)}, map[ordered.Key]int64{})
	got := lookup(t, st, biz, []string{"a", "b", "c", "lower", "never"})
	if len(got) != 2 || got["a"].SubKey != key(a).SubKey || got["c"].SubKey != key(c).SubKey {
		t.Fatalf("stored request ids %v, want exactly a and c", got)
	}
	// A group of fenced parts only commits nothing and says so per part.
	errs = persistShards(t, st, []ordered.ShardWrite{part(b, 1, 10, "b2")})
	wantFenced(t, "a lone fenced part", errs[0])
}

// testShardsDuplicates: a part holding stored request ids fails alone
// with a *ordered.DuplicateRequestsError naming only its stored ids; none
// of its rows or new ids is written, and the other parts commit.
func (s *suite) testShardsDuplicates(t *testing.T, st ordered.Store) {
	a, b, biz, ka, kb := s.twoShards(t, st, "grpdup")
	persist(t, st, a, 1, []ordered.Row{{Key: ka, Num: 1}}, []ordered.Request{Req(biz, "old", ka.SubKey, 1, 1)})
	errs := persistShards(t, st, []ordered.ShardWrite{
		{Shard: a, Epoch: 1, Rows: []ordered.Row{{Key: ka, Num: 3}},
			Reqs: []ordered.Request{Req(biz, "old", ka.SubKey, 2, 1), Req(biz, "new-a", ka.SubKey, 3, 1)}},
		{Shard: b, Epoch: 1, Rows: []ordered.Row{{Key: kb, Num: 4}},
			Reqs: []ordered.Request{Req(biz, "new-b", kb.SubKey, 4, 1)}},
	})
	var dup *ordered.DuplicateRequestsError
	if !errors.As(errs[0], &dup) {
		t.Fatalf("part with a stored id: %v, want *ordered.DuplicateRequestsError", errs[0])
	}
	if want := []ordered.RequestKey{{Biz: biz, ID: "old"}}; !slices.Equal(dup.Requests, want) {
		t.Fatalf("duplicates named %v, want %v", dup.Requests, want)
	}
	if errs[1] != nil {
		t.Fatalf("part beside a duplicate: %v, want committed", errs[1])
	}
	wantRows(t, "shard a after its refused part", st, a, 1, []ordered.Key{ka}, map[ordered.Key]int64{ka: 1})
	wantRows(t, "shard b", st, b, 1, []ordered.Key{kb}, map[ordered.Key]int64{kb: 4})
	got := lookup(t, st, biz, []string{"old", "new-a", "new-b"})
	if _, ok := got["new-a"]; ok || got["old"].Range != (segment.Range{First: 1, Last: 1}) || got["new-b"].SubKey != kb.SubKey {
		t.Fatalf("stored request ids %v, want old unchanged, new-b, and no new-a", got)
	}
}

// testShardsInvalid: a shard twice fails the whole call (nothing
// written); a malformed part, or one repeating an earlier part's request
// id, fails alone with segment.ErrInvalid.
func (s *suite) testShardsInvalid(t *testing.T, st ordered.Store) {
	a, b, biz, ka, kb := s.twoShards(t, st, "grpinv")
	_, err := st.PersistShards(ctx(t), []ordered.ShardWrite{
		{Shard: a, Epoch: 1, Rows: []ordered.Row{{Key: ka, Num: 1}}},
		{Shard: a, Epoch: 1, Rows: []ordered.Row{{Key: ka, Num: 2}}},
	})
	wantInvalid(t, "a shard twice", err)
	wantRows(t, "after the refused call", st, a, 1, []ordered.Key{ka}, map[ordered.Key]int64{})

	errs := persistShards(t, st, []ordered.ShardWrite{
		{Shard: a, Epoch: 1, Rows: []ordered.Row{{Key: kb, Num: 7}}}, // b's key in a's part
		{Shard: b, Epoch: 1, Rows: []ordered.Row{{Key: kb, Num: 3}}, Reqs: []ordered.Request{Req(biz, "x", kb.SubKey, 3, 1)}},
	})
	wantInvalid(t, "a row of another shard", errs[0])
	if errs[1] != nil {
		t.Fatalf("part beside a malformed one: %v, want committed", errs[1])
	}
	errs = persistShards(t, st, []ordered.ShardWrite{
		{Shard: b, Epoch: 1, Rows: []ordered.Row{{Key: kb, Num: 5}}, Reqs: []ordered.Request{Req(biz, "y", kb.SubKey, 5, 1)}},
		{Shard: a, Epoch: 1, Rows: []ordered.Row{{Key: ka, Num: 6}}, Reqs: []ordered.Request{Req(biz, "y", ka.SubKey, 6, 1)}},
	})
	if errs[0] != nil {
		t.Fatalf("first part of a repeated id: %v, want committed", errs[0])
	}
	wantInvalid(t, "a request id of an earlier part", errs[1])
	wantRows(t, "shard a", st, a, 1, []ordered.Key{ka}, map[ordered.Key]int64{})
	wantRows(t, "shard b", st, b, 1, []ordered.Key{kb}, map[ordered.Key]int64{kb: 5})
	if got := lookup(t, st, biz, []string{"y"}); got["y"].SubKey != kb.SubKey {
		t.Fatalf("request y stored as %v, want the first part's", got)
	}
}

// testShardsConcurrentFence is testConcurrentFence for group commits:
// writers persist one part of shard x (taken over in the middle) and one
// of shard y (never taken over) in each call. After Claim(e+1) of x
// returned, every x part must be fenced and write nothing, while the y
// parts of the same calls keep committing; the new owner of x loads
// exactly the last successful x part of each key.
func (s *suite) testShardsConcurrentFence(t *testing.T, st ordered.Store) {
	x, y := s.shard(t), s.shard(t)
	biz := s.biz("grpconc")
	const (
		rounds  = 5
		writers = 4
	)
	kx := Keys(biz, SubKeys(x, "k", writers))
	ky := Keys(biz, SubKeys(y, "k", writers))
	claim(t, st, x, 1)
	claim(t, st, y, 1)
	lastX := make([]int64, writers)
	n := int64(0)
	for e := int64(1); e <= rounds; e++ {
		var (
			ready, wg sync.WaitGroup
			claimed   atomic.Bool
			mu        sync.Mutex
			problems  []string
			okX       []string
			fencedX   []string
		)
		ready.Add(writers)
		for g := range writers {
			wg.Go(func() {
				var once sync.Once
				defer once.Do(ready.Done)
				for i, late := 0, 0; late < 3; i++ {
					after := claimed.Load()
					if after {
						late++
					}
					mu.Lock()
					n++
					v := n
					mu.Unlock()
					id := fmt.Sprintf("x%d", v)
					errs, err := st.PersistShards(ctx(t), []ordered.ShardWrite{
						{Shard: x, Epoch: e, Rows: []ordered.Row{{Key: kx[g], Num: v}}, Reqs: []ordered.Request{Req(biz, id, kx[g].SubKey, v, 1)}},
						{Shard: y, Epoch: 1, Rows: []ordered.Row{{Key: ky[g], Num: v}}},
					})
					mu.Lock()
					switch {
					case err != nil:
						problems = append(problems, "call: "+err.Error())
					case errs[1] != nil:
						problems = append(problems, "y part: "+errs[1].Error())
					case errs[0] == nil:
						if after {
							problems = append(problems, fmt.Sprintf("x part %s under epoch %d committed after Claim(%d) returned", id, e, e+1))
						}
						lastX[g] = max(lastX[g], v)
						okX = append(okX, id)
					case errors.Is(errs[0], ordered.ErrFenced):
						fencedX = append(fencedX, id)
					default:
						problems = append(problems, "x part: "+errs[0].Error())
					}
					mu.Unlock()
					if i >= 3 {
						once.Do(ready.Done)
					}
				}
			})
		}
		ready.Wait()
		claim(t, st, x, e+1)
		claimed.Store(true)
		wg.Wait()
		if len(problems) > 0 {
			t.Fatalf("round %d: %v", e, problems)
		}
		want := map[ordered.Key]int64{}
		for g := range writers {
			if lastX[g] > 0 {
				want[kx[g]] = lastX[g]
			}
		}
		wantRows(t, fmt.Sprintf("round %d: x after its takeover", e), st, x, e+1, kx, want)
		wantStored(t, fmt.Sprintf("round %d", e), st, biz, okX, fencedX)
		got := load(t, st, y, 1, ky)
		for g := range writers {
			if got[ky[g]] < lastX[g] {
				t.Fatalf("round %d: y row %v = %d, below the x part %d committed with it", e, ky[g], got[ky[g]], lastX[g])
			}
		}
	}
}

// wantStored fails unless every request id of okIDs (of writes that
// succeeded) is stored and none of fencedIDs (of fenced writes) is.
func wantStored(t *testing.T, what string, st ordered.Store, biz string, okIDs, fencedIDs []string) {
	t.Helper()
	stored := lookup(t, st, biz, slices.Concat(okIDs, fencedIDs))
	for _, id := range okIDs {
		if _, ok := stored[id]; !ok {
			t.Fatalf("%s: request %s of a successful write is not stored", what, id)
		}
	}
	for _, id := range fencedIDs {
		if _, ok := stored[id]; ok {
			t.Fatalf("%s: request %s of a fenced write is stored", what, id)
		}
	}
}

// twoShards returns two fresh shards claimed at epoch 1, a business named
// after label, and a key of it in each shard.
func (s *suite) twoShards(t *testing.T, st ordered.Store, label string) (a, b int, biz string, ka, kb ordered.Key) {
	t.Helper()
	a, b = s.shard(t), s.shard(t)
	biz = s.biz(label)
	ka = ordered.Key{Biz: biz, SubKey: SubKeys(a, "k", 1)[0]}
	kb = ordered.Key{Biz: biz, SubKey: SubKeys(b, "k", 1)[0]}
	claim(t, st, a, 1)
	claim(t, st, b, 1)
	return a, b, biz, ka, kb
}

// testShardsFencedDuplicate: a part that is both fenced and holds a stored
// request id is refused as fenced (as Persist refuses it: the epoch is
// checked first), and a part beside it whose ids are new commits.
func (s *suite) testShardsFencedDuplicate(t *testing.T, st ordered.Store) {
	a, b, biz, ka, kb := s.twoShards(t, st, "grpfdup")
	persist(t, st, a, 1, []ordered.Row{{Key: ka, Num: 1}}, []ordered.Request{Req(biz, "old", ka.SubKey, 1, 1)})
	claim(t, st, a, 2) // a's new owner
	errs := persistShards(t, st, []ordered.ShardWrite{
		{Shard: a, Epoch: 1, Rows: []ordered.Row{{Key: ka, Num: 3}}, Reqs: []ordered.Request{Req(biz, "old", ka.SubKey, 2, 1)}},
		{Shard: b, Epoch: 1, Rows: []ordered.Row{{Key: kb, Num: 4}}, Reqs: []ordered.Request{Req(biz, "new-b", kb.SubKey, 4, 1)}},
	})
	wantFenced(t, "a fenced part with a stored id", errs[0])
	if errs[1] != nil {
		t.Fatalf("part beside it: %v, want committed", errs[1])
	}
	wantRows(t, "shard a", st, a, 2, []ordered.Key{ka}, map[ordered.Key]int64{ka: 1})
	wantRows(t, "shard b", st, b, 1, []ordered.Key{kb}, map[ordered.Key]int64{kb: 4})
}

// testShardsFencedAndDuplicateApart: in one group commit, a part holding
// a stored request id, a fenced part and a part that is fine: each
// refusal fails only its own part (the store may have to leave both out
// one after the other), and the fine part commits with its rows and ids.
func (s *suite) testShardsFencedAndDuplicateApart(t *testing.T, st ordered.Store) {
	a, b, biz, ka, kb := s.twoShards(t, st, "grpapart")
	c := s.shard(t)
	kc := ordered.Key{Biz: biz, SubKey: SubKeys(c, "k", 1)[0]}
	claim(t, st, c, 1)
	persist(t, st, a, 1, []ordered.Row{{Key: ka, Num: 1}}, []ordered.Request{Req(biz, "old", ka.SubKey, 1, 1)})
	claim(t, st, b, 2) // b's new owner
	errs := persistShards(t, st, []ordered.ShardWrite{
		{Shard: a, Epoch: 1, Rows: []ordered.Row{{Key: ka, Num: 3}}, Reqs: []ordered.Request{Req(biz, "old", ka.SubKey, 2, 1)}},
		{Shard: b, Epoch: 1, Rows: []ordered.Row{{Key: kb, Num: 4}}, Reqs: []ordered.Request{Req(biz, "new-b", kb.SubKey, 4, 1)}},
		{Shard: c, Epoch: 1, Rows: []ordered.Row{{Key: kc, Num: 5}}, Reqs: []ordered.Request{Req(biz, "new-c", kc.SubKey, 5, 1)}},
	})
	var dup *ordered.DuplicateRequestsError
	if !errors.As(errs[0], &dup) {
		t.Fatalf("part with a stored id: %v, want *ordered.DuplicateRequestsError", errs[0])
	}
	wantFenced(t, "fenced part", errs[1])
	if errs[2] != nil {
		t.Fatalf("part beside both: %v, want committed", errs[2])
	}
	wantRows(t, "shard a", st, a, 1, []ordered.Key{ka}, map[ordered.Key]int64{ka: 1})
	wantRows(t, "shard b (its new owner's load)", st, b, 2, []ordered.Key{kb}, map[ordered.Key]int64{})
	wantRows(t, "shard c", st, c, 1, []ordered.Key{kc}, map[ordered.Key]int64{kc: 5})
	got := lookup(t, st, biz, []string{"old", "new-b", "new-c"})
	if _, ok := got["new-b"]; ok || got["old"].Range != (segment.Range{First: 1, Last: 1}) || got["new-c"].SubKey != kc.SubKey {
		t.Fatalf("stored request ids %v, want old unchanged, new-c, and no new-b", got)
	}
}
