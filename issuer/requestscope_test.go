package issuer

import (
	"context"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/idgen/idgen/segment"
)

// TestRequestIDsScopedToTheCaller is issue 30, item 3: ORDERED request
// ids are scoped to the token the request carried. Before, a second
// caller of the business who reused the victim's id got the victim's
// exact range back, learned its sub key and count from the mismatch
// error, and could claim an id the victim would use later so that the
// victim was refused.
func TestRequestIDsScopedToTheCaller(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "chat", Channel: segment.ChannelOrdered}); err != nil {
		t.Fatal(err)
	}
	_, victimTok, err := f.is.CreateBizToken(ctx, "chat", "victim")
	if err != nil {
		t.Fatal(err)
	}
	_, attackerTok, err := f.is.CreateBizToken(ctx, "chat", "attacker")
	if err != nil {
		t.Fatal(err)
	}
	const secretSub = "secret-room-42"
	victimReq := Request{Biz: "chat", Count: 17, SubKey: secretSub, RequestID: "r-1", Token: victimTok}
	victim, err := f.is.Next(ctx, victimReq)
	if err != nil {
		t.Fatal(err)
	}
	v := victim.Ranges[0]

	// The same id, sub key and count with another token: a range of its own.
	attackerReq := victimReq
	attackerReq.Token = attackerTok
	got, err := f.is.Next(ctx, attackerReq)
	if err != nil {
		t.Fatalf("another token reusing the id: %v", err)
	}
	if a := got.Ranges[0]; a.First <= v.Last {
		t.Fatalf("another token reusing the victim's request id got %v; the victim had %v (replayed or overlapping)", a, v)
	}
	// The same id with another sub key and count, from a third token:
	// served (a request of its own), so nothing about the victim's leaks.
	_, proberTok, err := f.is.CreateBizToken(ctx, "chat", "prober")
	if err != nil {
		t.Fatal(err)
	}
	probe := Request{Biz: "chat", Count: 1, SubKey: "probe", RequestID: "r-1", Token: proberTok}
	if _, err := f.is.Next(ctx, probe); err != nil {
		t.Fatalf("a third token's use of the id was checked against the victim's request: %v", err)
	}
	// An id the attacker claims first does not block the victim.
	pre := Request{Biz: "chat", Count: 1, SubKey: "elsewhere", RequestID: "future", Token: attackerTok}
	if _, err := f.is.Next(ctx, pre); err != nil {
		t.Fatal(err)
	}
	later := Request{Biz: "chat", Count: 17, SubKey: secretSub, RequestID: "future", Token: victimTok}
	lr, err := f.is.Next(ctx, later)
	if err != nil {
		t.Fatalf("the victim's use of an id another token claimed first: %v", err)
	}
	// The victim's retries replay the victim's ranges.
	for _, tc := range []struct {
		req  Request
		want segment.Range
	}{{victimReq, v}, {later, lr.Ranges[0]}} {
		again, err := f.is.Next(ctx, tc.req)
		if err != nil || again.Ranges[0] != tc.want {
			t.Fatalf("victim's retry of %s: %v, %v; want %v", tc.req.RequestID, again.Ranges, err, tc.want)
		}
	}
	// A mismatch within one scope names neither the stored sub key nor
	// the stored count.
	mis := victimReq
	mis.SubKey, mis.Count = "other", 2
	_, err = f.is.Next(ctx, mis)
	if !errors.Is(err, segment.ErrRequestMismatch) {
		t.Fatalf("reused id within the victim's scope: %v, want ErrRequestMismatch", err)
	}
	if msg := err.Error(); strings.Contains(msg, secretSub) || regexp.MustCompile(`\b17\b`).MatchString(msg) || !strings.Contains(msg, "use a new request_id") {
		t.Fatalf("mismatch error %q: names the stored sub key or count, or not what to do", msg)
	}
}

// TestRequestScope: no token, no scope; otherwise a fixed-length
// fingerprint that differs per token and holds neither the token nor its
// stored hash.
func TestRequestScope(t *testing.T) {
	if s := RequestScope(""); s != "" {
		t.Fatalf("scope without a token = %q, want empty", s)
	}
	tok := TokenPrefix + "0123456789ab_" + strings.Repeat("A", 43)
	a, b := RequestScope(tok), RequestScope(tok+"x")
	if a == b || len(a) != 16 || a != RequestScope(tok) {
		t.Fatalf("scopes %q %q: want 16 hex digits, stable per token, different per token", a, b)
	}
	h := hashToken(tok)
	if err := segment.ValidateRequestID(segment.RequestID{ID: "r", Scope: a}); err != nil || strings.Contains(tok, a) ||
		strings.Contains(hex.EncodeToString(h[:]), a) {
		t.Fatalf("scope %q: %v (or it shows the token or its stored hash)", a, err)
	}
}

// BenchmarkRequestScope is what an ORDERED request with an id and a token
// pays for its scope (requests without an id pay nothing).
func BenchmarkRequestScope(b *testing.B) {
	tok := TokenPrefix + "0123456789ab_" + strings.Repeat("A", 43)
	b.ReportAllocs()
	for b.Loop() {
		_ = RequestScope(tok)
	}
}
