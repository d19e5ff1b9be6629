package mysqlstore

import (
	"testing"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// TestRestoreRequests: the barrier's repair (segment/mysqlstore's
// RestoreRequests) stores request ids a lossy failover lost (deleted
// here) and leaves a stored one as it is; an invalid one is skipped, not
// an error that would stop the barrier. It lives here because the ids it
// restores are the owners': they are written and read back by this
// package's Persist and LookupRequests.
func TestRestoreRequests(t *testing.T) {
	seg, s := open(t, newTestDatabase(t), nil)
	ctx := testCtx(t)
	sh := segment.Shard("k")
	if err := s.Claim(ctx, sh, 1, "a:1"); err != nil {
		t.Fatal(err)
	}
	kept := ordered.Request{Biz: "chat", Scope: "s", ID: "kept", SubKey: "k", Count: 2, Range: segment.Range{First: 1, Last: 2}}
	lost := ordered.Request{Biz: "chat", Scope: "s", ID: "lost", SubKey: "k", Count: 1, Range: segment.Range{First: 3, Last: 3}}
	if err := s.Persist(ctx, sh, 1, []ordered.Row{{Key: ordered.Key{Biz: "chat", SubKey: "k"}, Num: 3}}, []ordered.Request{kept, lost}); err != nil {
		t.Fatal(err)
	}
	if _, err := seg.DB().ExecContext(ctx, `DELETE FROM ordered_request WHERE request_id = ?`, []byte(segment.StoredRequestID("s", "lost"))); err != nil {
		t.Fatal(err)
	}
	// The barrier's list: the lost id, the kept one with another range
	// (must not overwrite), and an invalid one (skipped).
	other := kept
	other.Range = segment.Range{First: 7, Last: 8}
	bad := ordered.Request{Biz: "chat", Scope: "s", ID: "", SubKey: "k", Count: 1, Range: segment.Range{First: 9, Last: 9}}
	if err := seg.RestoreRequests(ctx, []ordered.Request{lost, other, bad}); err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupRequests(ctx, "chat", "s", []string{"kept", "lost"})
	if err != nil {
		t.Fatal(err)
	}
	if got["lost"].Range != lost.Range || got["kept"].Range != kept.Range {
		t.Fatalf("after the restore: %+v; want lost %v back and kept %v unchanged", got, lost.Range, kept.Range)
	}
}
