package mysqlstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/storetest"
	"github.com/idgen/idgen/segment"
	segmentmysql "github.com/idgen/idgen/segment/mysqlstore"
)

func TestOwned_Conformance(t *testing.T) {
	dsn := newTestDatabase(t)
	storetest.Run(t, func(t *testing.T) ordered.Store {
		_, s := open(t, dsn, nil)
		return s
	})
}

func TestOwned_LeaseConformance(t *testing.T) {
	dsn := newTestDatabase(t)
	storetest.RunLease(t, func(t *testing.T) ordered.LeaseStore {
		_, s := open(t, dsn, nil)
		return s
	})
}

// TestOwned_PerRequestPathCompatible: owners and the per-request path
// (ReserveOrdered) share rows and request ids, so a cluster switching from
// one to the other continues above the numbers the other handed out and
// replays the other's request ids.
func TestOwned_PerRequestPathCompatible(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), nil)
	ctx := testCtx(t)
	b := mustCreate(t, seg, segment.Biz{Name: "compat", Channel: segment.ChannelOrdered, StartNum: 100})
	sub := storetest.SubKeys(7, "user-", 2)
	k, fresh := ordered.Key{Biz: b.Name, SubKey: sub[0]}, ordered.Key{Biz: b.Name, SubKey: sub[1]}

	r, err := seg.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: k.SubKey, Count: 3, StartNum: 100, RequestID: "old-req"})
	if err != nil || r != (segment.Range{First: 100, Last: 102}) {
		t.Fatalf("ReserveOrdered = %v, %v; want 100..102", r, err)
	}
	if err := s.Claim(ctx, 7, 1, "a:1"); err != nil {
		t.Fatal(err)
	}
	m, err := s.Load(ctx, 7, 1, []ordered.Key{k, fresh})
	if err != nil || len(m) != 1 || m[k] != 102 {
		t.Fatalf("Load of a row ReserveOrdered created = %v, %v; want %v: 102", m, err, k)
	}
	got, err := s.LookupRequests(ctx, b.Name, "", []string{"old-req"})
	if want := storetest.Req(b.Name, "old-req", k.SubKey, 102, 3); err != nil || got["old-req"] != want {
		t.Fatalf("LookupRequests of ReserveOrdered's request id = %+v, %v; want %+v", got, err, want)
	}
	err = s.Persist(ctx, 7, 1, []ordered.Row{{Key: k, Num: 150}}, []ordered.Request{storetest.Req(b.Name, "old-req", k.SubKey, 150, 1)})
	var dup *ordered.DuplicateRequestsError
	if !errors.As(err, &dup) {
		t.Fatalf("Persist reusing ReserveOrdered's request id: %v, want a DuplicateRequestsError", err)
	}

	// The owner persists; the per-request path continues above it and
	// replays the owner's request ids.
	if err := s.Persist(ctx, 7, 1, []ordered.Row{{Key: k, Num: 150}},
		[]ordered.Request{storetest.Req(b.Name, "owner-req", k.SubKey, 150, 2)}); err != nil {
		t.Fatal(err)
	}
	r, err = seg.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: k.SubKey, Count: 1, StartNum: 100})
	if err != nil || r.First != 151 {
		t.Fatalf("ReserveOrdered after Persist(150) = %v, %v; want 151..151", r, err)
	}
	rep, err := seg.ReserveOrderedReplay(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: k.SubKey, Count: 2, StartNum: 100, RequestID: "owner-req"})
	if err != nil || !rep.Replayed || rep.Range != (segment.Range{First: 149, Last: 150}) {
		t.Fatalf("ReserveOrderedReplay of the owner's request id = %+v, %v; want the stored 149..150, replayed", rep, err)
	}
	// And the next owner loads what the per-request path reserved.
	if err := s.Claim(ctx, 7, 2, "b:1"); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Load(ctx, 7, 2, []ordered.Key{k}); err != nil || m[k] != 151 {
		t.Fatalf("Load after ReserveOrdered = %v, %v; want 151", m, err)
	}
}

// TestOwned_PersistIsAWrite: every persist, even an empty one, and every
// load increments ordered_shard.persists (the write Galera certifies
// against a claim and against unapplied persists); a fenced one changes
// nothing. Claim records the owner.
func TestOwned_PersistIsAWrite(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), nil)
	ctx := testCtx(t)
	long := strings.Repeat("ü", 300) + "\xff"
	if err := s.Claim(ctx, 3, 5, long); err != nil {
		t.Fatalf("Claim with an owner longer than the column: %v", err)
	}
	for range 2 {
		if err := s.Persist(ctx, 3, 5, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Load(ctx, 3, 5, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, 3, 4, nil); !errors.Is(err, ordered.ErrFenced) {
		t.Fatalf("Load under a lower epoch: %v", err)
	}
	if err := s.Persist(ctx, 3, 4, nil, nil); !errors.Is(err, ordered.ErrFenced) || !strings.Contains(err.Error(), "another node took it over") {
		t.Fatalf("Persist under a lower epoch: %v", err)
	}
	if err := s.Persist(ctx, 3, 6, nil, nil); !errors.Is(err, ordered.ErrFenced) || !strings.Contains(err.Error(), "claim it again") {
		t.Fatalf("Persist under a higher epoch: %v", err)
	}
	var (
		epoch, persists int64
		owner           string
	)
	if err := seg.DB().QueryRowContext(ctx, `SELECT epoch, owner, persists FROM ordered_shard WHERE shard = 3`).Scan(&epoch, &owner, &persists); err != nil {
		t.Fatal(err)
	}
	if epoch != 5 || persists != 3 || owner != strings.Repeat("ü", 255) {
		t.Fatalf("ordered_shard row: epoch %d persists %d owner %q; want 5, 3, 255 × ü", epoch, persists, owner)
	}
	if err := s.Claim(ctx, 3, 6, "c:2"); err != nil {
		t.Fatal(err)
	}
	if err := seg.DB().QueryRowContext(ctx, `SELECT epoch, owner FROM ordered_shard WHERE shard = 3`).Scan(&epoch, &owner); err != nil || epoch != 6 || owner != "c:2" {
		t.Fatalf("after Claim(6): epoch %d owner %q, %v", epoch, owner, err)
	}
}

// TestOwned_ClaimWaitsForPersist: a Claim blocks while a persist of the
// shard holds its row, and the persist that held it commits.
func TestOwned_ClaimWaitsForPersist(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), nil)
	ctx := testCtx(t)
	if err := s.Claim(ctx, 9, 1, "a"); err != nil {
		t.Fatal(err)
	}
	// Hold the lock the way a persist in flight does.
	tx, err := seg.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := tx.ExecContext(ctx, `UPDATE ordered_shard SET persists = persists + 1 WHERE shard = 9 AND epoch = 1`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Claim(ctx, 9, 2, "b") }()
	select {
	case err := <-done:
		t.Fatalf("Claim returned (%v) while a persist held the shard", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Claim after the persist committed: %v", err)
	}
	if err := s.Persist(ctx, 9, 1, nil, nil); !errors.Is(err, ordered.ErrFenced) {
		t.Fatalf("Persist under the old epoch after the claim: %v", err)
	}
}

// TestOwned_PersistHoldsShardUntilCommit: a persist holds the shard from
// its first statement to its commit, so a Claim that arrives while the
// persist waits (here for a row lock) waits too, and the persist commits
// under its epoch. A fence that only checked the epoch and then wrote
// would let the Claim return first and the persist commit after it.
func TestOwned_PersistHoldsShardUntilCommit(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), func(c *segmentmysql.Config) { c.Timeout = 10 * time.Second })
	ctx := testCtx(t)
	const shard = 9
	k := ordered.Key{Biz: "b", SubKey: storetest.SubKeys(shard, "k", 1)[0]}
	if err := s.Claim(ctx, shard, 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(ctx, shard, 1, []ordered.Row{{Key: k, Num: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	blocker, err := seg.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback() //nolint:errcheck
	var num int64
	if err := blocker.QueryRowContext(ctx, `SELECT num FROM `+mysqldb.OrderedTable(shard)+` WHERE biz = ? AND sub_key = ? FOR UPDATE`,
		k.Biz, []byte(k.SubKey)).Scan(&num); err != nil {
		t.Fatal(err)
	}
	type outcome struct{ err error }
	persisted, claimed := make(chan outcome, 1), make(chan outcome, 1)
	go func() {
		err := s.Persist(ctx, shard, 1, []ordered.Row{{Key: k, Num: 5}}, nil)
		persisted <- outcome{err}
	}()
	time.Sleep(200 * time.Millisecond) // the persist is past its fence, waiting for the row
	go func() {
		err := s.Claim(ctx, shard, 2, "b")
		claimed <- outcome{err}
	}()
	select {
	case o := <-claimed:
		t.Fatalf("Claim returned (%v) while a persist of the shard was in flight", o.err)
	case o := <-persisted:
		t.Fatalf("Persist returned (%v) while its row was locked", o.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
	if p, c := <-persisted, <-claimed; p.err != nil || c.err != nil {
		t.Fatalf("persist: %v, claim: %v; want both to succeed (the persist had passed its fence before the claim)", p.err, c.err)
	}
	if m, err := s.Load(ctx, shard, 2, []ordered.Key{k}); err != nil || m[k] != 5 {
		t.Fatalf("Load under the new epoch = %v, %v; want the persist's 5", m, err)
	}
}

// BenchmarkOwnedPersist is the owners' group commit: one Persist of 1 or
// 16 rows (and as many request ids, or none) to one shard, one caller at
// a time (each shard has one persist loop), beside one ReserveOrdered
// statement for scale. On a crash-safe server the commit's fsync dominates
// all of them.
//
//	source .testenv && go test -run '^$' -bench BenchmarkOwnedPersist -benchtime 2000x ./ordered/mysqlstore/
func BenchmarkOwnedPersist(b *testing.B) {
	seg, s := open(b, newTestDatabase(b), nil)
	ctx := testCtx(b)
	const shard = 11
	if err := s.Claim(ctx, shard, 1, "bench"); err != nil {
		b.Fatal(err)
	}
	subs := storetest.SubKeys(shard, "k", 16)
	// The per-request path's cost of one number, for scale: one
	// auto-committed statement.
	biz := mustCreate(b, seg, segment.Biz{Name: "benchbase", Channel: segment.ChannelOrdered})
	b.Run("baseline=ReserveOrdered", func(b *testing.B) {
		for b.Loop() {
			if _, err := seg.ReserveOrdered(ctx, segment.OrderedRequest{Biz: biz.Name, SubKey: subs[0], Count: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	runs := 0
	for _, n := range []int{1, 16} {
		for _, withReqs := range []bool{false, true} {
			b.Run(fmt.Sprintf("rows=%d/requests=%v", n, withReqs), func(b *testing.B) {
				rows := make([]ordered.Row, n)
				var reqs []ordered.Request
				if withReqs {
					reqs = make([]ordered.Request, n)
				}
				runs++ // -count and b.Loop's calibration run it again: fresh request ids
				biz := fmt.Sprintf("bench%d%v_%d", n, withReqs, runs)
				for i := 0; b.Loop(); i++ {
					for j := range rows {
						rows[j] = ordered.Row{Key: ordered.Key{Biz: biz, SubKey: subs[j]}, Num: int64(i + 1)}
						if withReqs {
							reqs[j] = storetest.Req(biz, fmt.Sprintf("r%d-%d", i, j), subs[j], int64(i+1), 1)
						}
					}
					if err := s.Persist(ctx, shard, 1, rows, reqs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkOwnedLoad: one Load of 16 stored keys (a transaction with the
// fencing write and a commit, see Load).
//
//	source .testenv && go test -run '^$' -bench BenchmarkOwnedLoad -benchtime 2000x ./ordered/mysqlstore/
func BenchmarkOwnedLoad(b *testing.B) {
	_, s := open(b, newTestDatabase(b), nil)
	ctx := testCtx(b)
	const shard = 12
	if err := s.Claim(ctx, shard, 1, "bench"); err != nil {
		b.Fatal(err)
	}
	keys := storetest.Keys("bench", storetest.SubKeys(shard, "k", 16))
	rows := make([]ordered.Row, len(keys))
	for i, k := range keys {
		rows[i] = ordered.Row{Key: k, Num: int64(i + 1)}
	}
	if err := s.Persist(ctx, shard, 1, rows, nil); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if m, err := s.Load(ctx, shard, 1, keys); err != nil || len(m) != len(keys) {
			b.Fatal(m, err)
		}
	}
}

// TestOwned_PausedOwnerHoldingFenceRow is issue 29's hole j on a real
// server: an owner paused inside a persist (its transaction took the
// shard's fence row, then nothing) no longer blocks a successor's Claim
// beyond the store's session idle limit: the server ends the paused
// session and rolls its transaction back. Before, the Claim failed with a
// lock wait timeout for as long as the pause lasted (up to wait_timeout,
// 8 hours by default). Meanwhile the refusals are ErrShardBusy, so the
// coordinator retries soon instead of backing off.
func TestOwned_PausedOwnerHoldingFenceRow(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), nil)
	ctx := testCtx(t)
	const shard = 11
	if err := s.Claim(ctx, shard, 1, "paused:1"); err != nil {
		t.Fatal(err)
	}
	// The paused owner: its persist's first statement ran on one of the
	// store's sessions, and the process stopped before the commit.
	paused, err := seg.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Rollback() //nolint:errcheck
	if _, err := paused.ExecContext(ctx, `UPDATE ordered_shard SET persists = persists + 1 WHERE shard = ? AND epoch = 1`, shard); err != nil {
		t.Fatal(err)
	}
	var busy int
	start := time.Now()
	deadline := start.Add(90 * time.Second) // generous: the limit is seconds
	for {
		err := s.Claim(ctx, shard, 2, "successor:1")
		if err == nil {
			break
		}
		if !errors.Is(err, ordered.ErrShardBusy) && !errors.Is(err, segment.ErrUnavailable) {
			t.Fatalf("Claim while the paused owner holds the row: %v, want ErrShardBusy (retryable)", err)
		}
		if errors.Is(err, ordered.ErrShardBusy) {
			busy++
		}
		if time.Now().After(deadline) {
			t.Fatalf("the successor's Claim still fails after 90 s (%d lock waits): %v; the paused owner's session was never ended", busy, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if busy == 0 {
		t.Fatal("the Claim never waited for the paused owner: the test shows nothing")
	}
	t.Logf("the successor's Claim succeeded after %v and %d lock waits (session idle limit %v)",
		time.Since(start).Round(100*time.Millisecond), busy, mysqldb.SessionIdleLimit(s.conn.Timeout))
	// The owner resumes: its transaction is gone, and its retry is fenced.
	if err := paused.Commit(); err == nil {
		t.Fatal("the paused owner's transaction committed after the successor's claim")
	}
	if err := s.Persist(ctx, shard, 1, nil, nil); !errors.Is(err, ordered.ErrFenced) {
		t.Fatalf("the resumed owner's persist: %v, want ErrFenced", err)
	}
}

// TestOwned_RenewLease: the owner is compared as Claim stored it (cut to
// the column, made valid UTF-8), a nonce is 32 hex characters, a renewal
// touches nothing but the nonce, and malformed shard lists are refused
// before any statement.
func TestOwned_RenewLease(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), nil)
	ctx := testCtx(t)
	long := strings.Repeat("ü", 300) + "\xff"
	if err := s.Claim(ctx, 3, 5, long); err != nil {
		t.Fatal(err)
	}
	row := func() (persists int64, updated time.Time, nonce string) {
		t.Helper()
		if err := seg.DB().QueryRowContext(ctx, `SELECT persists, updated_at, lease_nonce FROM ordered_shard WHERE shard = 3`).Scan(&persists, &updated, &nonce); err != nil {
			t.Fatal(err)
		}
		return persists, updated, nonce
	}
	p0, u0, n0 := row()
	got, err := s.RenewLease(ctx, long, []ordered.ShardEpoch{{Shard: 3, Epoch: 5}})
	if err != nil || len(got) != 1 || got[0] != 3 {
		t.Fatalf("RenewLease with the long owner Claim cut = %v, %v; want [3]", got, err)
	}
	p1, u1, n1 := row()
	if p1 != p0 || !u1.Equal(u0) || n1 == n0 || len(n1) != 32 || strings.Trim(n1, "0123456789abcdef") != "" {
		t.Fatalf("after a renewal: persists %d -> %d, updated_at %v -> %v, nonce %q -> %q; want only a fresh 32-hex nonce", p0, p1, u0, u1, n0, n1)
	}
	for _, bad := range [][]ordered.ShardEpoch{
		{{Shard: 3, Epoch: 5}, {Shard: 3, Epoch: 5}},
		{{Shard: segment.OrderedShards, Epoch: 1}},
		{{Shard: -1, Epoch: 1}},
		{{Shard: 3, Epoch: -1}},
	} {
		if got, err := s.RenewLease(ctx, long, bad); !errors.Is(err, segment.ErrInvalid) || got != nil {
			t.Errorf("RenewLease(%v) = %v, %v; want segment.ErrInvalid", bad, got, err)
		}
	}
	if _, _, n := row(); n != n1 {
		t.Fatalf("refused renewals changed the nonce %q -> %q", n1, n)
	}
}

// TestOwned_RefusedCommitLeavesNoTransaction: a group commit opens its
// transaction with a statement on a session of its own (writeShardsOnce),
// so database/sql does not know about it; every way out of the one-round-
// trip commit (committed, a fenced part, a stored request id, a fenced
// part and a stored id together) gives the session back to the pool with
// no transaction open. The pool has one session, so the next call runs
// on the same one and reads its @@in_transaction (MariaDB).
func TestOwned_RefusedCommitLeavesNoTransaction(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), func(c *segmentmysql.Config) { c.MaxOpenConns = 1 })
	ctx := testCtx(t)
	inTx := func(what string) {
		t.Helper()
		var n int
		if err := seg.DB().QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&n); err != nil {
			t.Skipf("no @@in_transaction (not MariaDB?): %v", err)
		}
		if n != 0 {
			t.Fatalf("after %s: the pooled session is still in a transaction", what)
		}
	}
	for _, sh := range []int{1, 2} {
		if err := s.Claim(ctx, sh, 1, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Claim(ctx, 2, 2, "b"); err != nil {
		t.Fatal(err)
	}
	k1 := ordered.Key{Biz: "b1", SubKey: storetest.SubKeys(1, "k", 1)[0]}
	k2 := ordered.Key{Biz: "b1", SubKey: storetest.SubKeys(2, "k", 1)[0]}
	part := func(sh int, k ordered.Key, id string) ordered.ShardWrite {
		return ordered.ShardWrite{Shard: sh, Epoch: 1, Rows: []ordered.Row{{Key: k, Num: 5}},
			Reqs: []ordered.Request{storetest.Req("b1", id, k.SubKey, 5, 1)}}
	}
	if errs, err := s.PersistShards(ctx, []ordered.ShardWrite{part(1, k1, "x")}); err != nil || errs[0] != nil {
		t.Fatalf("committed persist: %v %v", err, errs)
	}
	inTx("a committed persist")
	errs, err := s.PersistShards(ctx, []ordered.ShardWrite{part(1, k1, "y"), part(2, k2, "z")})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], ordered.ErrFenced) {
		t.Fatalf("persist beside a fenced part: %v %v", err, errs)
	}
	inTx("a fenced part")
	errs, err = s.PersistShards(ctx, []ordered.ShardWrite{part(1, k1, "x")})
	var dup *ordered.DuplicateRequestsError
	if err != nil || !errors.As(errs[0], &dup) {
		t.Fatalf("persist of a stored id: %v %v", err, errs)
	}
	inTx("a stored request id")
	errs, err = s.PersistShards(ctx, []ordered.ShardWrite{part(1, k1, "x"), part(2, k2, "y")})
	if err != nil || !errors.As(errs[0], &dup) || !errors.Is(errs[1], ordered.ErrFenced) {
		t.Fatalf("persist of a stored id beside a fenced part: %v %v", err, errs)
	}
	inTx("a stored request id beside a fenced part")
}

// TestOwned_WriteBackGatedChecksOnItsSession: WriteBackGated runs its
// check once the session holds a connection (the one a failover's new
// connection reports itself on, to OnServerChange, before it is handed
// out) and before any statement: a failing check writes nothing, not
// even the fence's persists count, and comes back as it is; a passing
// one is run once and the exact counters land.
func TestOwned_WriteBackGatedChecksOnItsSession(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), nil)
	ctx := testCtx(t)
	k := ordered.Key{Biz: "chat", SubKey: "k"}
	sh := segment.Shard(k.SubKey)
	if err := s.Claim(ctx, sh, 1, "a:1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(ctx, sh, 1, []ordered.Row{{Key: k, Num: 100}}, nil); err != nil {
		t.Fatal(err)
	}
	state := func() (num, persists int64) {
		t.Helper()
		if err := seg.DB().QueryRowContext(ctx, `SELECT num FROM `+mysqldb.OrderedTable(sh)+` WHERE biz = ? AND sub_key = ?`, k.Biz, []byte(k.SubKey)).Scan(&num); err != nil {
			t.Fatal(err)
		}
		if err := seg.DB().QueryRowContext(ctx, `SELECT persists FROM ordered_shard WHERE shard = ?`, sh).Scan(&persists); err != nil {
			t.Fatal(err)
		}
		return num, persists
	}
	_, persists := state()
	changed := errors.New("the gate closed: the session reached another server")
	calls, inUse := 0, 0
	err := s.WriteBackGated(ctx, sh, 1, []ordered.Row{{Key: k, Num: 40}}, func() error {
		calls++
		inUse = seg.DB().Stats().InUse
		return changed
	})
	if !errors.Is(err, changed) {
		t.Fatalf("WriteBackGated with a failing check = %v, want its error", err)
	}
	if calls != 1 || inUse < 1 {
		t.Fatalf("check ran %d times with %d sessions in use; want once, on the write-back's session (>= 1 in use)", calls, inUse)
	}
	if num, p := state(); num != 100 || p != persists {
		t.Fatalf("after a refused write-back: row %d, persists %d; want 100, %d (no statement ran)", num, p, persists)
	}
	calls = 0
	if err := s.WriteBackGated(ctx, sh, 1, []ordered.Row{{Key: k, Num: 40}}, func() error { calls++; return nil }); err != nil {
		t.Fatal(err)
	}
	if num, _ := state(); num != 40 || calls != 1 {
		t.Fatalf("after a passing check: row %d, check ran %d times; want 40, once", num, calls)
	}
}
