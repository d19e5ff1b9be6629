package segment_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

func tokenHash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func testToken(id string) segment.BizToken {
	return segment.BizToken{ID: id, Label: "team " + id, Hash: tokenHash(id),
		CreatedAt: time.Date(2025, 3, 4, 5, 6, 7, 8_000_000, time.UTC)}
}

func mustNormalize(t *testing.T, b segment.Biz) segment.Biz {
	t.Helper()
	b, err := segment.NormalizeBiz(b)
	if err != nil {
		t.Fatalf("NormalizeBiz: %v", err)
	}
	return b
}

// wantInvalid fails unless err wraps ErrInvalid and mentions every part.
func wantInvalid(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("%s: %v, want ErrInvalid", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not mention %q", what, err, p)
		}
	}
}

// TestQuotaBurstValidation: id_quota and id_burst accept 0 and more, at
// creation and by update, and refuse negatives naming the field.
func TestQuotaBurstValidation(t *testing.T) {
	b := mustNormalize(t, segment.Biz{Name: "q", IDQuota: 500, IDBurst: 1000})
	if b.IDQuota != 500 || b.IDBurst != 1000 {
		t.Fatalf("NormalizeBiz lost quota/burst: %+v", b)
	}
	_, err := segment.NormalizeBiz(segment.Biz{Name: "q", IDQuota: -1})
	wantInvalid(t, "create with id_quota -1", err, "id_quota")
	_, err = segment.NormalizeBiz(segment.Biz{Name: "q", IDBurst: -1})
	wantInvalid(t, "create with id_burst -1", err, "id_burst")

	now := time.Unix(100, 0)
	q, burst := int64(7), int64(0)
	got, err := segment.ApplyBizUpdate(b, segment.BizUpdate{IDQuota: &q, IDBurst: &burst}, now)
	if err != nil || got.IDQuota != 7 || got.IDBurst != 0 {
		t.Fatalf("update quota 7 burst 0: %+v, %v", got, err)
	}
	neg := int64(-5)
	_, err = segment.ApplyBizUpdate(b, segment.BizUpdate{IDQuota: &neg}, now)
	wantInvalid(t, "update id_quota -5", err, "id_quota")
	_, err = segment.ApplyBizUpdate(b, segment.BizUpdate{IDBurst: &neg}, now)
	wantInvalid(t, "update id_burst -5", err, "id_burst")
}

// TestTokenFieldValidation: each rule on a token's ID, label and hash
// applies both to AddToken and to tokens given at creation.
func TestTokenFieldValidation(t *testing.T) {
	long := strings.Repeat("a", segment.MaxTokenIDLen)
	ok := []segment.BizToken{
		testToken("a"),
		testToken(long),
		testToken("A-z_0-9"),
		{ID: "nolabel", Hash: tokenHash("x")},
		{ID: "utf8", Label: "équipe 订单 " + strings.Repeat("x", segment.MaxTokenLabelLen-len("équipe 订单 ")), Hash: tokenHash("x")},
	}
	bad := []struct {
		tok  segment.BizToken
		part string
	}{
		{segment.BizToken{ID: "", Hash: tokenHash("x")}, "token id"},
		{segment.BizToken{ID: long + "a", Hash: tokenHash("x")}, "token id"},
		{segment.BizToken{ID: "a b", Hash: tokenHash("x")}, "' '"},
		{segment.BizToken{ID: "a.b", Hash: tokenHash("x")}, "'.'"},
		{segment.BizToken{ID: "é", Hash: tokenHash("x")}, "'é'"},
		{segment.BizToken{ID: "l", Label: strings.Repeat("x", segment.MaxTokenLabelLen+1), Hash: tokenHash("x")}, "label"},
		{segment.BizToken{ID: "l", Label: "bad \xff", Hash: tokenHash("x")}, "UTF-8"},
		{segment.BizToken{ID: "l", Label: "new\nline", Hash: tokenHash("x")}, "control"},
		{segment.BizToken{ID: "l", Label: "esc \x1b[31m", Hash: tokenHash("x")}, "control"},
		{segment.BizToken{ID: "l", Label: "c1 \u0085", Hash: tokenHash("x")}, "control"},
		{segment.BizToken{ID: "h"}, "hash"},
		{segment.BizToken{ID: "h", Hash: make([]byte, 31)}, "hash"},
		{segment.BizToken{ID: "h", Hash: make([]byte, 33)}, "hash"},
	}
	base := mustNormalize(t, segment.Biz{Name: "tok"})
	for _, tok := range ok {
		if _, err := segment.ApplyBizUpdate(base, segment.BizUpdate{AddToken: &tok}, time.Unix(1, 0)); err != nil {
			t.Errorf("AddToken(%q): %v", tok.ID, err)
		}
		if _, err := segment.NormalizeBiz(segment.Biz{Name: "tok", Tokens: []segment.BizToken{tok}}); err != nil {
			t.Errorf("create with token %q: %v", tok.ID, err)
		}
	}
	for _, tc := range bad {
		_, err := segment.ApplyBizUpdate(base, segment.BizUpdate{AddToken: &tc.tok}, time.Unix(1, 0))
		wantInvalid(t, fmt.Sprintf("AddToken(%+q)", tc.tok.ID), err, tc.part)
		_, err = segment.NormalizeBiz(segment.Biz{Name: "tok", Tokens: []segment.BizToken{tc.tok}})
		wantInvalid(t, fmt.Sprintf("create with token %+q", tc.tok.ID), err, tc.part)
	}
}

// TestAddRevokeToken: AddToken appends (stamping a token without
// CreatedAt with the update's time, in UTC), refuses a duplicate ID and a
// token past MaxBizTokens saying to revoke one; RevokeToken removes by ID
// and refuses an unknown one listing the existing IDs; revoke+add in one
// update rotates a full list.
func TestAddRevokeToken(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 6_000_000, time.FixedZone("X", 3600))
	b := mustNormalize(t, segment.Biz{Name: "tok"})
	for i := range segment.MaxBizTokens {
		tok := segment.BizToken{ID: fmt.Sprintf("t%d", i), Hash: tokenHash(fmt.Sprint(i))}
		var err error
		if b, err = segment.ApplyBizUpdate(b, segment.BizUpdate{AddToken: &tok}, now); err != nil {
			t.Fatalf("AddToken %d: %v", i, err)
		}
	}
	if len(b.Tokens) != segment.MaxBizTokens {
		t.Fatalf("%d tokens, want %d", len(b.Tokens), segment.MaxBizTokens)
	}
	first := b.Tokens[0]
	if !first.CreatedAt.Equal(now) || first.CreatedAt.Location() != time.UTC || !bytes.Equal(first.Hash, tokenHash("0")) {
		t.Errorf("first token %+v: want CreatedAt %v in UTC and the hash as given", first, now)
	}

	extra := testToken("extra")
	_, err := segment.ApplyBizUpdate(b, segment.BizUpdate{AddToken: &extra}, now)
	wantInvalid(t, "AddToken past the limit", err, "revoke one first")
	dup := testToken("t3")
	_, err = segment.ApplyBizUpdate(b, segment.BizUpdate{RevokeToken: tokPtr("t0"), AddToken: &dup}, now)
	wantInvalid(t, "AddToken of an existing id", err, `"t3"`)

	_, err = segment.ApplyBizUpdate(b, segment.BizUpdate{RevokeToken: tokPtr("nope")}, now)
	wantInvalid(t, "RevokeToken of an unknown id", err, `"nope"`, "t0, t1, t2")
	empty := mustNormalize(t, segment.Biz{Name: "empty"})
	_, err = segment.ApplyBizUpdate(empty, segment.BizUpdate{RevokeToken: tokPtr("x")}, now)
	wantInvalid(t, "RevokeToken on a business without tokens", err, "no tokens")

	// Rotation in one update on a full list: revoke applies first.
	rot, err := segment.ApplyBizUpdate(b, segment.BizUpdate{RevokeToken: tokPtr("t2"), AddToken: &extra}, now)
	if err != nil {
		t.Fatalf("revoke t2 + add extra: %v", err)
	}
	var ids []string
	for _, tok := range rot.Tokens {
		ids = append(ids, tok.ID)
	}
	if got := strings.Join(ids, ","); got != "t0,t1,t3,t4,t5,t6,t7,extra" {
		t.Errorf("tokens after rotation: %s", got)
	}
	if !rot.Tokens[7].CreatedAt.Equal(extra.CreatedAt) {
		t.Errorf("a given CreatedAt was replaced: %v, want %v", rot.Tokens[7].CreatedAt, extra.CreatedAt)
	}
	// The revoke did not touch the input's list (its backing array).
	if len(b.Tokens) != segment.MaxBizTokens || b.Tokens[2].ID != "t2" {
		t.Errorf("ApplyBizUpdate changed its input: %v", b.Tokens)
	}
	// Revoking the last token leaves none.
	one := mustNormalize(t, segment.Biz{Name: "one", Tokens: []segment.BizToken{testToken("only")}})
	if got, err := segment.ApplyBizUpdate(one, segment.BizUpdate{RevokeToken: tokPtr("only")}, now); err != nil || len(got.Tokens) != 0 {
		t.Errorf("revoke the only token: %+v, %v", got.Tokens, err)
	}
}

// TestCreateTokensValidated: tokens given at creation must have unique IDs
// and be at most MaxBizTokens.
func TestCreateTokensValidated(t *testing.T) {
	_, err := segment.NormalizeBiz(segment.Biz{Name: "c", Tokens: []segment.BizToken{testToken("a"), testToken("b"), testToken("a")}})
	wantInvalid(t, "create with a duplicate token id", err, `"a"`, "twice")
	var many []segment.BizToken
	for i := range segment.MaxBizTokens + 1 {
		many = append(many, testToken(fmt.Sprint(i)))
	}
	_, err = segment.NormalizeBiz(segment.Biz{Name: "c", Tokens: many})
	wantInvalid(t, "create with too many tokens", err, "tokens", fmt.Sprint(segment.MaxBizTokens))
	if _, err := segment.NormalizeBiz(segment.Biz{Name: "c", Tokens: many[:segment.MaxBizTokens]}); err != nil {
		t.Errorf("create with MaxBizTokens tokens: %v", err)
	}
}

// TestBizNoAliasing: neither NormalizeBiz nor ApplyBizUpdate returns
// slices shared with their inputs, so a caller changing its own token,
// key or plugin slices afterwards cannot change a store's state.
func TestBizNoAliasing(t *testing.T) {
	key := bytes.Repeat([]byte{1}, segment.KeySize)
	toks := []segment.BizToken{testToken("a")}
	plugins := []string{"audit"}
	b := mustNormalize(t, segment.Biz{Name: "alias", Key: key, Tokens: toks, Plugins: plugins})
	key[0], toks[0].Hash[0], toks[0].ID, plugins[0] = 9, 9, "changed", "changed"
	if b.Key[0] != 1 || b.Tokens[0].Hash[0] == 9 || b.Tokens[0].ID != "a" || b.Plugins[0] != "audit" {
		t.Fatalf("NormalizeBiz result shares memory with its input: %+v", b)
	}

	add := testToken("b")
	newKey := bytes.Repeat([]byte{2}, segment.WrappedKeySize)
	u := segment.BizUpdate{AddToken: &add, Key: newKey}
	got, err := segment.ApplyBizUpdate(b, u, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	add.Hash[0], newKey[0] = 9, 9
	got.Tokens[0].Hash[0], got.Key[1], got.Plugins[0] = 7, 7, "changed"
	if got.Tokens[1].Hash[0] == 9 || got.Key[0] != 2 {
		t.Errorf("ApplyBizUpdate result shares memory with the update")
	}
	if b.Tokens[0].Hash[0] == 7 || b.Key[1] != 1 || b.Plugins[0] != "audit" {
		t.Errorf("ApplyBizUpdate result shares memory with its input business")
	}
}

// TestKeySizes: a key is the plain KeySize bytes or a WrappedKeySize-byte
// wrapped key, at creation and by BizUpdate.Key; other lengths (an empty
// key given explicitly included) are refused and the key is kept as given.
func TestKeySizes(t *testing.T) {
	wrapped := bytes.Repeat([]byte{3}, segment.WrappedKeySize)
	b := mustNormalize(t, segment.Biz{Name: "k", Key: wrapped})
	if !bytes.Equal(b.Key, wrapped) {
		t.Fatalf("wrapped key at creation came back as %x", []byte(b.Key))
	}
	for _, n := range []int{1, segment.KeySize - 1, segment.KeySize + 1, segment.WrappedKeySize - 1, segment.WrappedKeySize + 1, 64} {
		_, err := segment.NormalizeBiz(segment.Biz{Name: "k", Key: make([]byte, n)})
		wantInvalid(t, fmt.Sprintf("create with a %d-byte key", n), err, "secret key", fmt.Sprint(n))
		_, err = segment.ApplyBizUpdate(b, segment.BizUpdate{Key: make([]byte, n)}, time.Unix(1, 0))
		wantInvalid(t, fmt.Sprintf("update to a %d-byte key", n), err, "secret key", fmt.Sprint(n))
	}
	_, err := segment.ApplyBizUpdate(b, segment.BizUpdate{Key: segment.SecretKey{}}, time.Unix(1, 0))
	wantInvalid(t, "update to an empty key", err, "secret key")

	plain := bytes.Repeat([]byte{4}, segment.KeySize)
	got, err := segment.ApplyBizUpdate(b, segment.BizUpdate{Key: plain}, time.Unix(1, 0))
	if err != nil || !bytes.Equal(got.Key, plain) {
		t.Fatalf("update to a plain key: %x, %v", []byte(got.Key), err)
	}
	// Issued businesses may re-wrap their key: it opens to the same one.
	issued := true
	if b, err = segment.ApplyBizUpdate(b, segment.BizUpdate{Issued: &issued}, time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if got, err = segment.ApplyBizUpdate(b, segment.BizUpdate{Key: plain}, time.Unix(1, 0)); err != nil || !bytes.Equal(got.Key, plain) {
		t.Fatalf("re-wrap the key of an issued business: %x, %v", []byte(got.Key), err)
	}
}

func tokPtr[T any](v T) *T { return &v }
