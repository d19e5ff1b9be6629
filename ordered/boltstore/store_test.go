package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/internal/boltfile"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/storetest"
	"github.com/idgen/idgen/segment"
	segmentbolt "github.com/idgen/idgen/segment/boltstore"
)

// open opens a segment store in dir (closed at cleanup) and the owners'
// store in its file.
func open(t testing.TB, dir string, opts segmentbolt.Options) (*segmentbolt.Store, *Store) {
	t.Helper()
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 100 * time.Millisecond
	}
	seg, err := segmentbolt.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = seg.Close() })
	return seg, New(seg)
}

func TestOwnedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ordered.Store {
		_, s := open(t, t.TempDir(), segmentbolt.Options{})
		return s
	})
}

// TestOwnedPerRequestPathCompatible: owners and ReserveOrdered share rows
// and request ids, so a node switching from one to the other continues
// above the numbers the other handed out and replays its request ids.
func TestOwnedPerRequestPathCompatible(t *testing.T) {
	ctx := context.Background()
	seg, s := open(t, t.TempDir(), segmentbolt.Options{})
	if _, err := seg.CreateBiz(ctx, segment.Biz{Name: "compat", Channel: segment.ChannelOrdered, StartNum: 100}); err != nil {
		t.Fatal(err)
	}
	sub := storetest.SubKeys(7, "user-", 2)
	k, fresh := ordered.Key{Biz: "compat", SubKey: sub[0]}, ordered.Key{Biz: "compat", SubKey: sub[1]}

	r, err := seg.ReserveOrdered(ctx, segment.OrderedRequest{Biz: "compat", SubKey: k.SubKey, Count: 3, StartNum: 100, RequestID: "old-req"})
	if err != nil || r != (segment.Range{First: 100, Last: 102}) {
		t.Fatalf("ReserveOrdered = %v, %v; want 100..102", r, err)
	}
	if err := s.Claim(ctx, 7, 1, "self"); err != nil {
		t.Fatal(err)
	}
	m, err := s.Load(ctx, 7, 1, []ordered.Key{k, fresh})
	if err != nil || len(m) != 1 || m[k] != 102 {
		t.Fatalf("Load of a row ReserveOrdered created = %v, %v; want %v: 102", m, err, k)
	}
	got, err := s.LookupRequests(ctx, "compat", "", []string{"old-req"})
	if want := storetest.Req("compat", "old-req", k.SubKey, 102, 3); err != nil || got["old-req"] != want {
		t.Fatalf("LookupRequests of ReserveOrdered's request id = %+v, %v; want %+v", got, err, want)
	}
	err = s.Persist(ctx, 7, 1, []ordered.Row{{Key: k, Num: 150}}, []ordered.Request{storetest.Req("compat", "old-req", k.SubKey, 150, 1)})
	var dup *ordered.DuplicateRequestsError
	if !errors.As(err, &dup) {
		t.Fatalf("Persist reusing ReserveOrdered's request id: %v, want a DuplicateRequestsError", err)
	}

	if err := s.Persist(ctx, 7, 1, []ordered.Row{{Key: k, Num: 150}},
		[]ordered.Request{storetest.Req("compat", "owner-req", k.SubKey, 150, 2)}); err != nil {
		t.Fatal(err)
	}
	r, err = seg.ReserveOrdered(ctx, segment.OrderedRequest{Biz: "compat", SubKey: k.SubKey, Count: 1, StartNum: 100})
	if err != nil || r.First != 151 {
		t.Fatalf("ReserveOrdered after Persist(150) = %v, %v; want 151..151", r, err)
	}
	rep, err := seg.ReserveOrderedReplay(ctx, segment.OrderedRequest{Biz: "compat", SubKey: k.SubKey, Count: 2, StartNum: 100, RequestID: "owner-req"})
	if err != nil || !rep.Replayed || rep.Range != (segment.Range{First: 149, Last: 150}) {
		t.Fatalf("ReserveOrderedReplay of the owner's request id = %+v, %v; want the stored 149..150, replayed", rep, err)
	}
	if err := s.Claim(ctx, 7, 2, "self"); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Load(ctx, 7, 2, []ordered.Key{k}); err != nil || m[k] != 151 {
		t.Fatalf("Load after ReserveOrdered = %v, %v; want 151", m, err)
	}
}

// TestOwnedSurvivesReopen: epochs, rows and request ids are in the file.
func TestOwnedSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	seg, s := open(t, dir, segmentbolt.Options{})
	k := ordered.Key{Biz: "b", SubKey: storetest.SubKeys(2, "k", 1)[0]}
	if err := s.Claim(ctx, 2, 4, "self"); err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(ctx, 2, 4, []ordered.Row{{Key: k, Num: 77}}, []ordered.Request{storetest.Req("b", "r", k.SubKey, 77, 2)}); err != nil {
		t.Fatal(err)
	}
	if err := seg.Close(); err != nil {
		t.Fatal(err)
	}
	_, s = open(t, dir, segmentbolt.Options{})
	if err := s.Claim(ctx, 2, 3, "self"); !errors.Is(err, ordered.ErrFenced) {
		t.Fatalf("Claim below the epoch stored before the reopen: %v, want ErrFenced", err)
	}
	if m, err := s.Load(ctx, 2, 4, []ordered.Key{k}); err != nil || m[k] != 77 {
		t.Fatalf("Load after reopen = %v, %v; want 77", m, err)
	}
	if m, err := s.LookupRequests(ctx, "b", "", []string{"r"}); err != nil || m["r"].Range != (segment.Range{First: 76, Last: 77}) {
		t.Fatalf("LookupRequests after reopen = %v, %v", m, err)
	}
}

// TestOwnedExpiredRequests: a request id past RequestRetention counts as
// gone (as in ReserveOrderedReplay), even before the cleanup removed it:
// it is not a duplicate, and storing it again replaces it (and its expiry
// index entry, so the cleanup does not delete the new one early).
func TestOwnedExpiredRequests(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	_, s := open(t, t.TempDir(), segmentbolt.Options{Clock: clk, RequestRetention: time.Hour, CleanupInterval: time.Hour})
	k := ordered.Key{Biz: "b", SubKey: storetest.SubKeys(5, "k", 1)[0]}
	if err := s.Claim(ctx, 5, 1, "self"); err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(ctx, 5, 1, []ordered.Row{{Key: k, Num: 1}}, []ordered.Request{storetest.Req("b", "r", k.SubKey, 1, 1)}); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Hour)
	if m, err := s.LookupRequests(ctx, "b", "", []string{"r"}); err != nil || len(m) != 0 {
		t.Fatalf("LookupRequests of an expired id = %v, %v; want none", m, err)
	}
	if err := s.Persist(ctx, 5, 1, []ordered.Row{{Key: k, Num: 2}}, []ordered.Request{storetest.Req("b", "r", k.SubKey, 2, 1)}); err != nil {
		t.Fatalf("Persist reusing an expired id: %v", err)
	}
	// The replaced record's index entry went with it: the expiry index
	// holds the new record's entry only, so the cleanup has nothing to
	// purge (it deletes by index entries older than the retention).
	var index [][]byte
	if err := s.file.DB.View(func(tx *bolt.Tx) error {
		return tx.Bucket(boltfile.BucketReqTime).ForEach(func(k, _ []byte) error {
			index = append(index, bytes.Clone(k))
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	want := append(boltfile.U64(clk.Now().UnixNano()), boltfile.JoinKey("b", "r")...)
	if len(index) != 1 || !bytes.Equal(index[0], want) {
		t.Fatalf("expiry index after reuse = %q, want only the new record's entry %q (the old entry was replaced)", index, want)
	}
	if m, err := s.LookupRequests(ctx, "b", "", []string{"r"}); err != nil || m["r"].Range.Last != 2 {
		t.Fatalf("LookupRequests after reuse = %v, %v; want the new range", m, err)
	}
}

// BenchmarkOwnedPersist: one Persist (one fsynced bbolt transaction) of 1
// or 16 rows with as many request ids, one caller at a time.
//
//	go test -run '^$' -bench BenchmarkOwnedPersist ./ordered/boltstore/
func BenchmarkOwnedPersist(b *testing.B) {
	_, s := open(b, b.TempDir(), segmentbolt.Options{})
	ctx := context.Background()
	if err := s.Claim(ctx, 11, 1, "bench"); err != nil {
		b.Fatal(err)
	}
	subs := storetest.SubKeys(11, "k", 16)
	runs := 0
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			runs++ // -count runs it again: fresh request ids
			rows := make([]ordered.Row, n)
			reqs := make([]ordered.Request, n)
			for i := 0; b.Loop(); i++ {
				for j := range rows {
					rows[j] = ordered.Row{Key: ordered.Key{Biz: "bench", SubKey: subs[j]}, Num: int64(i + 1)}
					reqs[j] = storetest.Req("bench", fmt.Sprintf("r%d-%d-%d", runs, i, j), subs[j], int64(i+1), 1)
				}
				if err := s.Persist(ctx, 11, 1, rows, reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
