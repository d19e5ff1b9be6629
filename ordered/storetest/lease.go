package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// The cases of ordered.LeaseStore (ordered/storelease.go): renewals write
// a fresh nonce only under the caller's epoch and owner, every claim
// writes a fresh one, a write-back clears it, and ClaimObserved refuses,
// changing nothing, once the nonce changed since it was observed, also
// when a renewal races it.

type leaseCase struct {
	name string
	fn   func(t *testing.T, st ordered.LeaseStore)
}

func (s *suite) leaseCases() []leaseCase {
	return []leaseCase{
		{"LeaseNoncesEveryShard", s.testLeaseNonces},
		{"LeaseRenewOwnEpochAndOwner", s.testLeaseRenewOwn},
		{"LeaseClaimWritesFreshNonce", s.testLeaseClaimFresh},
		{"LeaseClaimObservedRefusesRenewed", s.testLeaseClaimObserved},
		{"LeaseClaimObservedNoRow", s.testLeaseClaimNoRow},
		{"LeaseWriteBackClears", s.testLeaseWriteBack},
		{"LeaseRenewRacesClaimObserved", s.testLeaseRace},
		{"LeaseRaceNegativeControl", s.testLeaseRaceControl},
	}
}

// RunLease runs the lease cases alone against stores made by open (the
// rules of Run's doc apply): for a store whose other methods are checked
// elsewhere, such as the simulator's.
func RunLease(t *testing.T, open func(t *testing.T) ordered.LeaseStore) {
	s := newSuite(t, nil)
	for _, lc := range s.leaseCases() {
		t.Run(lc.name, func(t *testing.T) { lc.fn(t, open(t)) })
	}
}

func nonces(t *testing.T, st ordered.LeaseStore) []string {
	t.Helper()
	n, err := st.LeaseNonces(ctx(t))
	if err != nil {
		t.Fatalf("LeaseNonces: %v", err)
	}
	if len(n) != segment.OrderedShards {
		t.Fatalf("LeaseNonces returned %d nonces, want one per shard (%d)", len(n), segment.OrderedShards)
	}
	return n
}

func nonceOf(t *testing.T, st ordered.LeaseStore, shard int) string {
	t.Helper()
	return nonces(t, st)[shard]
}

func renew(t *testing.T, st ordered.LeaseStore, owner string, shards ...ordered.ShardEpoch) []int {
	t.Helper()
	got, err := st.RenewLease(ctx(t), owner, shards)
	if err != nil {
		t.Fatalf("RenewLease(%q, %v): %v", owner, shards, err)
	}
	return got
}

func claimAs(t *testing.T, st ordered.Store, shard int, epoch int64, owner string) {
	t.Helper()
	if err := st.Claim(ctx(t), shard, epoch, owner); err != nil {
		t.Fatalf("Claim(shard %d, epoch %d, %q): %v", shard, epoch, owner, err)
	}
}

// wantLeaseRenewed fails unless err is ClaimObserved's refusal (and not
// a fencing, which the caller would act on differently).
func wantLeaseRenewed(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ordered.ErrLeaseRenewed) || errors.Is(err, ordered.ErrFenced) {
		t.Fatalf("%s: error %v, want one wrapping ordered.ErrLeaseRenewed only", what, err)
	}
}

// wantHeld fails unless the shard's stored epoch is epoch and its stored
// owner is owner: Load checks the epoch, a renewal by owner under epoch
// (which writes a new nonce) the owner.
func wantHeld(t *testing.T, what string, st ordered.LeaseStore, shard int, epoch int64, owner string) {
	t.Helper()
	if _, err := st.Load(ctx(t), shard, epoch, nil); err != nil {
		t.Fatalf("%s: Load under epoch %d: %v; want the epoch unchanged", what, epoch, err)
	}
	if got := renew(t, st, owner, ordered.ShardEpoch{Shard: shard, Epoch: epoch}); !slices.Equal(got, []int{shard}) {
		t.Fatalf("%s: renewal by %q under epoch %d renewed %v; want the owner unchanged", what, owner, epoch, got)
	}
}

func (s *suite) testLeaseNonces(t *testing.T, st ordered.LeaseStore) {
	sh := s.shard(t)
	if n := nonceOf(t, st, sh); n != "" {
		t.Fatalf("nonce of a shard never claimed: %q, want empty", n)
	}
	claimAs(t, st, sh, 1, "a:1")
	n := nonces(t, st)
	if len(n[sh]) == 0 {
		t.Fatalf("nonce after a claim: empty")
	}
	if got := renew(t, st, "a:1"); got != nil {
		t.Fatalf("RenewLease of no shards = %v, want nil", got)
	}
}

func (s *suite) testLeaseRenewOwn(t *testing.T, st ordered.LeaseStore) {
	a, b, c, never := s.shard(t), s.shard(t), s.shard(t), s.shard(t)
	claimAs(t, st, a, 2, "x:1")
	claimAs(t, st, b, 3, "x:1")
	claimAs(t, st, c, 1, "y:1")
	before := nonces(t, st)
	got := renew(t, st, "x:1",
		ordered.ShardEpoch{Shard: c, Epoch: 1},     // another owner's
		ordered.ShardEpoch{Shard: never, Epoch: 1}, // no row
		ordered.ShardEpoch{Shard: b, Epoch: 2},     // another epoch
		ordered.ShardEpoch{Shard: a, Epoch: 2})
	if !slices.Equal(got, []int{a}) {
		t.Fatalf("renewal renewed %v, want only shard %d (its own epoch and owner)", got, a)
	}
	after := nonces(t, st)
	if after[a] == before[a] || after[a] == "" {
		t.Fatalf("renewed shard's nonce %q -> %q: want a fresh one", before[a], after[a])
	}
	for _, sh := range []int{b, c, never} {
		if after[sh] != before[sh] {
			t.Fatalf("shard %d not the caller's: nonce changed %q -> %q", sh, before[sh], after[sh])
		}
	}
	// Every renewal writes a fresh nonce; the answer is ascending.
	got = renew(t, st, "x:1", ordered.ShardEpoch{Shard: b, Epoch: 3}, ordered.ShardEpoch{Shard: a, Epoch: 2})
	if want := slices.Sorted(slices.Values([]int{a, b})); !slices.Equal(got, want) {
		t.Fatalf("renewal renewed %v, want %v (ascending)", got, want)
	}
	again := nonces(t, st)
	if again[a] == after[a] || again[b] == before[b] {
		t.Fatalf("a second renewal kept a nonce: shard %d %q -> %q, shard %d %q -> %q", a, after[a], again[a], b, before[b], again[b])
	}
	// A newer owner's claim: the old owner's renewals renew nothing.
	claimAs(t, st, a, 4, "z:1")
	if got := renew(t, st, "x:1", ordered.ShardEpoch{Shard: a, Epoch: 2}); len(got) != 0 {
		t.Fatalf("renewal of a deposed epoch renewed %v, want nothing", got)
	}
}

func (s *suite) testLeaseClaimFresh(t *testing.T, st ordered.LeaseStore) {
	sh := s.shard(t)
	claimAs(t, st, sh, 1, "a:1")
	n1 := nonceOf(t, st, sh)
	claimAs(t, st, sh, 2, "b:1")
	n2 := nonceOf(t, st, sh)
	claimAs(t, st, sh, 2, "b:1") // a retried claim
	n3 := nonceOf(t, st, sh)
	if n1 == "" || n2 == "" || n3 == "" || n1 == n2 || n2 == n3 || n1 == n3 {
		t.Fatalf("nonces after three claims %q, %q, %q: want three fresh ones", n1, n2, n3)
	}
	if err := st.ClaimObserved(ctx(t), sh, 3, "c:1", n3); err != nil {
		t.Fatalf("ClaimObserved over the current nonce: %v", err)
	}
	if n4 := nonceOf(t, st, sh); n4 == n3 || n4 == "" {
		t.Fatalf("ClaimObserved kept the nonce %q: want a fresh one", n4)
	}
}

func (s *suite) testLeaseClaimObserved(t *testing.T, st ordered.LeaseStore) {
	sh := s.shard(t)
	claimAs(t, st, sh, 1, "old:1")
	seen := nonceOf(t, st, sh)
	renew(t, st, "old:1", ordered.ShardEpoch{Shard: sh, Epoch: 1})
	renewed := nonceOf(t, st, sh)
	wantLeaseRenewed(t, "ClaimObserved after a renewal", st.ClaimObserved(ctx(t), sh, 2, "new:1", seen))
	if n := nonceOf(t, st, sh); n != renewed {
		t.Fatalf("refused ClaimObserved changed the nonce %q -> %q", renewed, n)
	}
	wantHeld(t, "after the refused ClaimObserved", st, sh, 1, "old:1")

	// The fencing rules come first: a lower or an equal epoch of
	// another owner is fenced, whatever the nonce.
	cur := nonceOf(t, st, sh)
	var fe *ordered.FencedError
	if err := st.ClaimObserved(ctx(t), sh, 0, "new:1", cur); !errors.As(err, &fe) || fe.Stored != 1 {
		t.Fatalf("ClaimObserved below the stored epoch: %v, want a *FencedError at 1", err)
	}
	if err := st.ClaimObserved(ctx(t), sh, 1, "new:1", seen); !errors.As(err, &fe) {
		t.Fatalf("ClaimObserved of the stored epoch by another owner: %v, want a *FencedError", err)
	}

	if err := st.ClaimObserved(ctx(t), sh, 2, "new:1", cur); err != nil {
		t.Fatalf("ClaimObserved over the current nonce: %v", err)
	}
	claimed := nonceOf(t, st, sh)
	if got := renew(t, st, "old:1", ordered.ShardEpoch{Shard: sh, Epoch: 1}); len(got) != 0 {
		t.Fatalf("the old owner's renewal after the claim renewed %v, want nothing", got)
	}
	if n := nonceOf(t, st, sh); n != claimed {
		t.Fatalf("the deposed owner's renewal changed the nonce %q -> %q", claimed, n)
	}
	// A retry of the committed claim (its answer lost) finds its own
	// epoch and owner, and its own fresh nonce: it succeeds.
	if err := st.ClaimObserved(ctx(t), sh, 2, "new:1", cur); err != nil {
		t.Fatalf("retried ClaimObserved: %v", err)
	}
	wantHeld(t, "after the claim", st, sh, 2, "new:1")
}

func (s *suite) testLeaseClaimNoRow(t *testing.T, st ordered.LeaseStore) {
	sh := s.shard(t)
	wantLeaseRenewed(t, "ClaimObserved of a shard without a row over a nonce",
		st.ClaimObserved(ctx(t), sh, 1, "a:1", "0123456789abcdef0123456789abcdef"))
	if n := nonceOf(t, st, sh); n != "" {
		t.Fatalf("refused ClaimObserved left nonce %q", n)
	}
	_, err := st.Load(ctx(t), sh, 1, nil)
	wantFenced(t, "Load after a refused ClaimObserved of a shard without a row (want it still unclaimed)", err)
	if err := st.ClaimObserved(ctx(t), sh, 1, "a:1", ""); err != nil {
		t.Fatalf("ClaimObserved of a shard without a row over the empty nonce: %v", err)
	}
	if n := nonceOf(t, st, sh); n == "" {
		t.Fatal("ClaimObserved left the nonce empty")
	}
	wantHeld(t, "after ClaimObserved of a shard without a row", st, sh, 1, "a:1")
}

func (s *suite) testLeaseWriteBack(t *testing.T, st ordered.LeaseStore) {
	sh := s.shard(t)
	k := Keys(s.biz("lwb"), SubKeys(sh, "k", 1))[0]
	claimAs(t, st, sh, 1, "a:1")
	n := nonceOf(t, st, sh)
	persist(t, st, sh, 1, []ordered.Row{{Key: k, Num: 10}}, nil)
	if _, err := st.PersistShards(ctx(t), []ordered.ShardWrite{{Shard: sh, Epoch: 1, Rows: []ordered.Row{{Key: k, Num: 11}}}}); err != nil {
		t.Fatal(err)
	}
	load(t, st, sh, 1, []ordered.Key{k})
	if got := nonceOf(t, st, sh); got != n {
		t.Fatalf("Persist, PersistShards or Load changed the nonce %q -> %q", n, got)
	}
	wantFenced(t, "WriteBack of another epoch", st.WriteBack(ctx(t), sh, 2, []ordered.Row{{Key: k, Num: 1}}))
	if got := nonceOf(t, st, sh); got != n {
		t.Fatalf("a fenced WriteBack changed the nonce %q -> %q", n, got)
	}
	if err := st.WriteBack(ctx(t), sh, 1, []ordered.Row{{Key: k, Num: 10}}); err != nil {
		t.Fatal(err)
	}
	if got := nonceOf(t, st, sh); got != "" {
		t.Fatalf("nonce after WriteBack %q, want it cleared", got)
	}
	// A renewal still in flight at the hand-off sets no lease again.
	if got := renew(t, st, "a:1", ordered.ShardEpoch{Shard: sh, Epoch: 1}); len(got) != 0 {
		t.Fatalf("renewal after the hand-off cleared the nonce renewed %v; want nothing", got)
	}
	if got := nonceOf(t, st, sh); got != "" {
		t.Fatalf("nonce after a late renewal %q, want it still cleared", got)
	}
	if err := st.ClaimObserved(ctx(t), sh, 2, "b:1", ""); err != nil {
		t.Fatalf("ClaimObserved over the cleared nonce: %v", err)
	}
	// A hand-off of a shard with no rows to write back clears it too.
	if nonceOf(t, st, sh) == "" {
		t.Fatal("no nonce after the claim")
	}
	if err := st.WriteBack(ctx(t), sh, 2, nil); err != nil {
		t.Fatalf("WriteBack of no rows: %v", err)
	}
	if got := nonceOf(t, st, sh); got != "" {
		t.Fatalf("nonce after a WriteBack of no rows %q, want it cleared", got)
	}
}

// testLeaseRace: renewals of the old owner race ClaimObserved of takers.
// Whichever commits first, the other must see it: a renewal that renewed
// committed before every successful claim (a later one finds the raised
// epoch), so one that started after a claim's observation returned must
// make that claim fail. Each call is placed in real time by an atomic
// sequence taken when it starts and when it returns (no clocks, no
// sleeps).
func (s *suite) testLeaseRace(t *testing.T, st ordered.LeaseStore) {
	if v := leaseRace(t, st, s.shard(t)); len(v) > 0 {
		t.Fatalf("%d rounds broke the lease: %v", len(v), v)
	}
}

// testLeaseRaceControl is testLeaseRace's negative control: takers that
// ignore the nonce (ClaimObserved is Claim) must break it, so the race
// test can fail. The rounds where a renewal returned before the takers
// started break it every time.
func (s *suite) testLeaseRaceControl(t *testing.T, st ordered.LeaseStore) {
	if v := leaseRace(t, ignoreNonce{st}, s.shard(t)); len(v) == 0 {
		t.Fatal("takers that ignore the nonce passed the race: it would not catch a ClaimObserved that ignores the nonce")
	}
}

// ignoreNonce is a LeaseStore whose ClaimObserved ignores the nonce.
type ignoreNonce struct{ ordered.LeaseStore }

func (s ignoreNonce) ClaimObserved(ctx context.Context, shard int, epoch int64, owner, _ string) error {
	return s.Claim(ctx, shard, epoch, owner)
}

const (
	raceRounds   = 12
	raceRenewers = 4
	raceRenewals = 4 // each renewer's, at most
	raceTakers   = 3
	raceAttempts = 2 * raceRenewers * raceRenewals // each looping taker's, at most
)

// raceClaim is a successful claim of leaseRace: the nonce it observed,
// and when the observation returned.
type raceClaim struct {
	owner, observed string
	seenAt          int64
}

// leaseRace runs the rounds of testLeaseRace on shard sh and returns what
// broke the lease. Each round the old owner claims a new epoch and the
// nonce is observed; then a renewal returns before the racers start
// (rounds 0 mod 3: every taker claims over that observation and must
// fail), or a claim over it returns first (1 mod 3: no renewal may
// renew), or the racers start at once and each taker observes again
// after each refusal until it claims (2 mod 3: the contested race).
func leaseRace(t *testing.T, st ordered.LeaseStore, sh int) (broken []string) {
	t.Helper()
	var seq atomic.Int64
	for r := range raceRounds {
		base := int64(r+1) * 100
		old := fmt.Sprintf("old-%d:1", r)
		claimAs(t, st, sh, base, old)
		seen, seenAt := nonceOf(t, st, sh), seq.Add(1)
		mine := []ordered.ShardEpoch{{Shard: sh, Epoch: base}}
		var (
			mu sync.Mutex
			// renewedAt holds the start of each renewal that renewed.
			renewedAt []int64
			claims    []raceClaim
		)
		switch r % 3 {
		case 0:
			at := seq.Add(1)
			if slices.Equal(renew(t, st, old, mine...), []int{sh}) {
				renewedAt = append(renewedAt, at)
			}
		case 1:
			owner := fmt.Sprintf("first-%d:1", r)
			if err := st.ClaimObserved(ctx(t), sh, base+50, owner, seen); err != nil {
				t.Fatalf("round %d: ClaimObserved before any renewal: %v", r, err)
			}
			claims = append(claims, raceClaim{owner, seen, seenAt})
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range raceRenewers {
			wg.Go(func() {
				<-start
				deposed := false
				for range raceRenewals {
					at := seq.Add(1)
					got, err := st.RenewLease(ctx(t), old, mine)
					switch {
					case err != nil:
						t.Errorf("round %d: RenewLease: %v", r, err)
						return
					case slices.Equal(got, []int{sh}) && deposed:
						t.Errorf("round %d: a renewal renewed after one of the same owner found the shard claimed over", r)
					case slices.Equal(got, []int{sh}):
						mu.Lock()
						renewedAt = append(renewedAt, at)
						mu.Unlock()
					case len(got) == 0:
						deposed = true
					default:
						t.Errorf("round %d: RenewLease of shard %d renewed %v", r, sh, got)
					}
				}
			})
		}
		for i := range raceTakers {
			wg.Go(func() {
				<-start
				owner := fmt.Sprintf("taker-%d-%d:1", r, i)
				observed, at := seen, seenAt
				for range raceAttempts {
					if r%3 == 2 {
						n, err := st.LeaseNonces(ctx(t))
						if err != nil {
							t.Errorf("round %d: LeaseNonces: %v", r, err)
							return
						}
						observed, at = n[sh], seq.Add(1)
					}
					err := st.ClaimObserved(ctx(t), sh, base+1+int64(i), owner, observed)
					switch {
					case err == nil:
						mu.Lock()
						claims = append(claims, raceClaim{owner, observed, at})
						mu.Unlock()
						return
					case errors.Is(err, ordered.ErrFenced):
						return // a taker with a higher epoch claimed
					case !errors.Is(err, ordered.ErrLeaseRenewed):
						t.Errorf("round %d: ClaimObserved: %v", r, err)
						return
					}
					if r%3 != 2 {
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		byNonce := map[string][]string{}
		for _, c := range claims {
			byNonce[c.observed] = append(byNonce[c.observed], c.owner)
			for _, at := range renewedAt {
				if at > c.seenAt {
					broken = append(broken, fmt.Sprintf("round %d: %s claimed over nonce %q although a renewal that started after that nonce was read renewed", r, c.owner, c.observed))
					break
				}
			}
		}
		for n, owners := range byNonce {
			if len(owners) > 1 {
				broken = append(broken, fmt.Sprintf("round %d: %d claims over nonce %q succeeded (%v)", r, len(owners), n, owners))
			}
		}
	}
	return broken
}
