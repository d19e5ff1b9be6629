package mysqlstore

import (
	"net"
	"strings"
	"testing"

	"github.com/idgen/idgen/segment"
)

func TestSplitMembers(t *testing.T) {
	for _, tc := range []struct {
		dsn, first string
		members    []string
		bad        bool
	}{
		{"u:p@tcp(h:1)/db", "u:p@tcp(h:1)/db", nil, false},
		{"u:p@tcp(a:1,b:2, c:3)/db?x=1", "u:p@tcp(a:1)/db?x=1", []string{"a:1", "b:2", "c:3"}, false},
		{"u:p@tcp(a:1,b)/db", "", nil, true},
		{"u:p@unix(/tmp/s)/db", "u:p@unix(/tmp/s)/db", nil, false},
	} {
		first, members, err := splitMembers(tc.dsn)
		if (err != nil) != tc.bad || first != tc.first || strings.Join(members, " ") != strings.Join(tc.members, " ") {
			t.Errorf("splitMembers(%q) = %q, %q, %v", tc.dsn, first, members, err)
		}
	}
}

// TestIntegration_MemberList: a DSN naming a dead member first opens on the
// next one, and the store knows the server's identity.
func TestIntegration_MemberList(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nobody listens there now
	m := tcpList.FindStringSubmatch(dsn)
	if m == nil {
		t.Fatalf("test DSN %q has no tcp(...)", dsn)
	}
	multi := strings.Replace(dsn, m[0], "@tcp("+dead+","+m[1]+")", 1)
	s := openStore(t, multi, nil)
	b := mustCreate(t, s, segment.Biz{Name: "members"})
	if r, err := s.ReserveSegment(testCtx(t), b.Name, 10); err != nil || r.First != 1 {
		t.Fatalf("reserve through the second member: %v, %v", r, err)
	}
	if id := s.Server(); !strings.HasPrefix(id, "server/") && !strings.HasPrefix(id, "mysql/") {
		t.Errorf("Server() = %q, want the server's identity", id)
	}
	if s.ServerChanges() != 0 {
		t.Errorf("ServerChanges() = %d on one server", s.ServerChanges())
	}
}

// TestIntegration_Raise: raising never lowers a counter, creates missing
// ORDERED rows, and the next reservations continue above.
func TestIntegration_Raise(t *testing.T) {
	s := openStore(t, newTestDatabase(t, testServer(t), true), nil)
	ctx := testCtx(t)
	b := mustCreate(t, s, segment.Biz{Name: "raise"})
	if err := s.RaiseSegment(ctx, b.Name, 500); err != nil {
		t.Fatal(err)
	}
	if err := s.RaiseSegment(ctx, b.Name, 100); err != nil { // lower: no change
		t.Fatal(err)
	}
	if r, err := s.ReserveSegment(ctx, b.Name, 10); err != nil || r.First != 501 {
		t.Fatalf("segment after the raise: %v, %v; want 501", r, err)
	}
	if _, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "high", Count: 50}); err != nil {
		t.Fatal(err)
	}
	marks := []segment.OrderedMark{{Biz: b.Name, SubKey: "high", Last: 20}, {Biz: b.Name, SubKey: "missing", Last: 70}}
	for i := range 1200 { // more than one batch in some shards
		marks = append(marks, segment.OrderedMark{Biz: b.Name, SubKey: "k" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Last: int64(i + 1)})
	}
	if err := s.RaiseOrdered(ctx, marks); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key   string
		first int64
	}{{"high", 51}, {"missing", 71}, {"kb", 3}} {
		r, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: tc.key, Count: 1})
		if err != nil || r.First != tc.first {
			t.Errorf("%s after the raise: %v, %v; want %d", tc.key, r, err, tc.first)
		}
	}
}
