package storetest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// The per-business ID quota and client tokens (security issue 19), and
// keys wrapped by a master key: every store keeps them as given and
// applies token changes inside its read-modify-write.

// token returns a valid token whose hash holds the bytes a careless
// encoding would mangle (0x00, 0xff, invalid UTF-8), created at a
// millisecond in a zone other than UTC.
func token(id string) segment.BizToken {
	h := sha256.Sum256([]byte(id))
	h[0], h[1], h[2] = 0x00, 0xff, 0xc3
	return segment.BizToken{ID: id, Label: "holder of " + id + ", équipe 订单", Hash: h[:],
		CreatedAt: time.Date(2025, 6, 7, 8, 9, 10, 123_000_000, time.FixedZone("CEST", 2*3600))}
}

// tokenIDs returns the IDs of ts, in order.
func tokenIDs(ts []segment.BizToken) []string {
	ids := []string{}
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}

// checkToken fails unless got is want as stored: same ID, label and hash
// bytes, the same instant (at least millisecond precision) in UTC.
func checkToken(t *testing.T, what string, got, want segment.BizToken) {
	t.Helper()
	if got.ID != want.ID || got.Label != want.Label || !bytes.Equal(got.Hash, want.Hash) {
		t.Errorf("%s: token %q label %q hash %x, want %q label %q hash %x",
			what, got.ID, got.Label, got.Hash, want.ID, want.Label, want.Hash)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) || got.CreatedAt.Location() != time.UTC {
		t.Errorf("%s: token %q created %v, want %v in UTC", what, got.ID, got.CreatedAt, want.CreatedAt)
	}
}

// listed returns the business name from ListBiz, failing if it is absent.
func listed(t *testing.T, st segment.Store, name string) segment.Biz {
	t.Helper()
	all, err := st.ListBiz(ctx(t))
	if err != nil {
		t.Fatalf("ListBiz: %v", err)
	}
	for _, b := range all {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("ListBiz does not list %q", name)
	return segment.Biz{}
}

// testQuotaBurst: id_quota and id_burst round-trip through create and
// update (other updates keep them); negatives are refused naming the
// field and change nothing.
func (s *suite) testQuotaBurst(t *testing.T, st segment.Store) {
	in := segment.Biz{Name: s.name("quota"), RateLimit: 10, IDQuota: 5000, IDBurst: 20000}
	created := create(t, st, in)
	for what, b := range map[string]segment.Biz{"CreateBiz": created, "GetBiz": mustGet(t, st, in.Name), "ListBiz": listed(t, st, in.Name)} {
		if b.IDQuota != 5000 || b.IDBurst != 20000 || b.RateLimit != 10 {
			t.Errorf("%s: id_quota %d id_burst %d rate_limit %d, want 5000, 20000, 10", what, b.IDQuota, b.IDBurst, b.RateLimit)
		}
	}
	upd, err := st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{IDQuota: ptr(int64(7)), IDBurst: ptr(int64(0))})
	if err != nil {
		t.Fatalf("UpdateBiz quota 7 burst 0: %v", err)
	}
	for what, b := range map[string]segment.Biz{"UpdateBiz": upd, "GetBiz": mustGet(t, st, in.Name)} {
		if b.IDQuota != 7 || b.IDBurst != 0 {
			t.Errorf("%s after update: id_quota %d id_burst %d, want 7, 0", what, b.IDQuota, b.IDBurst)
		}
	}
	if upd, err = st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Step: ptr(int64(33))}); err != nil || upd.IDQuota != 7 {
		t.Errorf("an update of step changed id_quota: %+v, %v", upd, err)
	}
	_, err = st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{IDQuota: ptr(int64(-1))})
	wantErr(t, "UpdateBiz id_quota -1", err, segment.ErrInvalid, "id_quota")
	_, err = st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{IDBurst: ptr(int64(-1))})
	wantErr(t, "UpdateBiz id_burst -1", err, segment.ErrInvalid, "id_burst")
	if got := mustGet(t, st, in.Name); got.IDQuota != 7 || got.IDBurst != 0 {
		t.Errorf("refused updates changed the biz: id_quota %d id_burst %d", got.IDQuota, got.IDBurst)
	}
	_, err = st.CreateBiz(ctx(t), segment.Biz{Name: s.name("quota-bad"), IDQuota: -5})
	wantErr(t, "CreateBiz id_quota -5", err, segment.ErrInvalid, "id_quota")
	_, err = st.CreateBiz(ctx(t), segment.Biz{Name: s.name("burst-bad"), IDBurst: -5})
	wantErr(t, "CreateBiz id_burst -5", err, segment.ErrInvalid, "id_burst")
}

// testTokensAddGetList: a token added by UpdateBiz is returned by it, by
// GetBiz and by ListBiz with its hash bytes intact; a token added without
// CreatedAt is stamped (UTC); other updates keep the tokens; changing a
// returned hash does not change the stored one.
func (s *suite) testTokensAddGetList(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("tok")})
	if len(b.Tokens) != 0 || len(mustGet(t, st, b.Name).Tokens) != 0 {
		t.Fatalf("a new business has tokens: %v", b.Tokens)
	}
	tok := token("ci-2025")
	upd, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{AddToken: &tok})
	if err != nil {
		t.Fatalf("AddToken: %v", err)
	}
	for what, got := range map[string]segment.Biz{"UpdateBiz": upd, "GetBiz": mustGet(t, st, b.Name), "ListBiz": listed(t, st, b.Name)} {
		if len(got.Tokens) != 1 {
			t.Fatalf("%s: tokens %v, want [%s]", what, tokenIDs(got.Tokens), tok.ID)
		}
		checkToken(t, what, got.Tokens[0], tok)
	}

	// Stamped when added without a creation time.
	bare := segment.BizToken{ID: "bare", Hash: token("bare").Hash}
	if upd, err = st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{AddToken: &bare}); err != nil {
		t.Fatalf("AddToken without CreatedAt: %v", err)
	}
	got := mustGet(t, st, b.Name)
	if !slices.Equal(tokenIDs(got.Tokens), []string{tok.ID, "bare"}) {
		t.Fatalf("tokens %v, want [%s bare]", tokenIDs(got.Tokens), tok.ID)
	}
	stamped := got.Tokens[1]
	if stamped.CreatedAt.IsZero() || stamped.CreatedAt.Location() != time.UTC || !stamped.CreatedAt.Equal(upd.Tokens[1].CreatedAt) {
		t.Errorf("token added without CreatedAt: stored %v, returned %v; want the same non-zero UTC time",
			stamped.CreatedAt, upd.Tokens[1].CreatedAt)
	}

	// Other updates keep the tokens.
	if upd, err = st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{Description: ptr("kept")}); err != nil || len(upd.Tokens) != 2 {
		t.Fatalf("update of the description: tokens %v, %v", tokenIDs(upd.Tokens), err)
	}
	// What a caller does with returned slices stays its own.
	got.Tokens[0].Hash[5] ^= 0xff
	tok.Hash[6] ^= 0xff
	checkToken(t, "GetBiz after callers changed their copies", mustGet(t, st, b.Name).Tokens[0], token("ci-2025"))
}

// testTokensLimits: an existing ID, a token past MaxBizTokens and
// malformed tokens are refused with ErrInvalid, and leave the list as it
// was.
func (s *suite) testTokensLimits(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("toklim")})
	var want []string
	for i := range segment.MaxBizTokens {
		tok := token(fmt.Sprintf("t%d", i))
		if _, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{AddToken: &tok}); err != nil {
			t.Fatalf("AddToken %d of %d: %v", i+1, segment.MaxBizTokens, err)
		}
		want = append(want, tok.ID)
		if i == 0 {
			dup := token("t0")
			dup.Label = "another holder"
			_, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{AddToken: &dup})
			wantErr(t, "AddToken of an existing id", err, segment.ErrInvalid, `"t0"`)
		}
	}
	extra := token("extra")
	_, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{AddToken: &extra})
	wantErr(t, fmt.Sprintf("token %d", segment.MaxBizTokens+1), err, segment.ErrInvalid, "revoke one first")

	for _, bad := range []segment.BizToken{
		{ID: "", Hash: extra.Hash},
		{ID: "has space", Hash: extra.Hash},
		{ID: strings.Repeat("x", segment.MaxTokenIDLen+1), Hash: extra.Hash},
		{ID: "short-hash", Hash: extra.Hash[:16]},
		{ID: "ctl-label", Label: "a\nb", Hash: extra.Hash},
	} {
		_, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{RevokeToken: ptr("t0"), AddToken: &bad})
		wantErr(t, fmt.Sprintf("AddToken(%q)", bad.ID), err, segment.ErrInvalid, "token")
	}
	got := mustGet(t, st, b.Name)
	if !slices.Equal(tokenIDs(got.Tokens), want) {
		t.Fatalf("refused updates changed the tokens: %v, want %v", tokenIDs(got.Tokens), want)
	}
	checkToken(t, "t0 after a refused duplicate", got.Tokens[0], token("t0"))
}

// testTokensRevoke: RevokeToken removes exactly that token, keeping the
// others in order; an unknown (or already revoked) ID is ErrInvalid
// naming it; revoke and add in one update rotate a full list.
func (s *suite) testTokensRevoke(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("tokrev")})
	for _, id := range []string{"a", "b", "c"} {
		tok := token(id)
		if _, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{AddToken: &tok}); err != nil {
			t.Fatalf("AddToken %s: %v", id, err)
		}
	}
	upd, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{RevokeToken: ptr("b")})
	if err != nil {
		t.Fatalf("RevokeToken b: %v", err)
	}
	for what, got := range map[string]segment.Biz{"UpdateBiz": upd, "GetBiz": mustGet(t, st, b.Name), "ListBiz": listed(t, st, b.Name)} {
		if !slices.Equal(tokenIDs(got.Tokens), []string{"a", "c"}) {
			t.Fatalf("%s after revoking b: %v, want [a c]", what, tokenIDs(got.Tokens))
		}
		checkToken(t, what, got.Tokens[1], token("c"))
	}
	for _, id := range []string{"b", "zz"} {
		_, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{RevokeToken: ptr(id)})
		wantErr(t, "RevokeToken "+id, err, segment.ErrInvalid, `"`+id+`"`)
	}
	// Rotation of a full list in one update.
	for i := len(upd.Tokens); i < segment.MaxBizTokens; i++ {
		tok := token(fmt.Sprintf("f%d", i))
		if _, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{AddToken: &tok}); err != nil {
			t.Fatalf("fill to %d tokens: %v", segment.MaxBizTokens, err)
		}
	}
	next := token("a-next")
	if upd, err = st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{RevokeToken: ptr("a"), AddToken: &next}); err != nil {
		t.Fatalf("rotate a to a-next on a full list: %v", err)
	}
	got := mustGet(t, st, b.Name)
	if n := len(got.Tokens); n != segment.MaxBizTokens || got.Tokens[0].ID != "c" || got.Tokens[n-1].ID != "a-next" {
		t.Fatalf("after rotation: %v, want c first and a-next last", tokenIDs(got.Tokens))
	}
	// Revoking every token leaves none.
	for _, id := range tokenIDs(got.Tokens) {
		if upd, err = st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{RevokeToken: ptr(id)}); err != nil {
			t.Fatalf("RevokeToken %s: %v", id, err)
		}
	}
	if got := mustGet(t, st, b.Name); len(got.Tokens) != 0 || len(upd.Tokens) != 0 {
		t.Fatalf("after revoking all: %v / %v, want none", tokenIDs(got.Tokens), tokenIDs(upd.Tokens))
	}
}

// testTokensAtCreate: tokens given to CreateBiz are stored as given, and
// validated like AddToken: duplicate IDs and more than MaxBizTokens are
// refused, leaving no business behind.
func (s *suite) testTokensAtCreate(t *testing.T, st segment.Store) {
	in := segment.Biz{Name: s.name("tokcreate"), Tokens: []segment.BizToken{token("one"), token("two")}}
	created := create(t, st, in)
	for what, got := range map[string]segment.Biz{"CreateBiz": created, "GetBiz": mustGet(t, st, in.Name), "ListBiz": listed(t, st, in.Name)} {
		if !slices.Equal(tokenIDs(got.Tokens), []string{"one", "two"}) {
			t.Fatalf("%s: tokens %v, want [one two]", what, tokenIDs(got.Tokens))
		}
		checkToken(t, what, got.Tokens[1], token("two"))
	}
	var many []segment.BizToken
	for i := range segment.MaxBizTokens + 1 {
		many = append(many, token(fmt.Sprintf("m%d", i)))
	}
	for what, ts := range map[string][]segment.BizToken{
		"duplicate ids":                        {token("x"), token("x")},
		fmt.Sprint(len(many), " tokens"):       many,
		"a malformed token":                    {{ID: "bad id", Hash: token("y").Hash}},
		"a token without hash (a raw secret?)": {{ID: "nohash"}},
	} {
		name := s.name("tokcreate-bad")
		_, err := st.CreateBiz(ctx(t), segment.Biz{Name: name, Tokens: ts})
		wantErr(t, "CreateBiz with "+what, err, segment.ErrInvalid, "token")
		if _, err := st.GetBiz(ctx(t), name); err == nil {
			t.Errorf("CreateBiz with %s left the business behind", what)
		}
	}
}

// testTokensConcurrentAdd: goroutines adding distinct tokens to one
// business at once all succeed and all their tokens are stored: no
// update reads the list, loses the race and writes back a list without
// the other's token.
func (s *suite) testTokensConcurrentAdd(t *testing.T, st segment.Store) {
	const n = 8 // = MaxBizTokens: every addition must land for all to fit
	b := create(t, st, segment.Biz{Name: s.name("tokconc")})
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			tok := token(fmt.Sprintf("g%d", i))
			_, errs[i] = st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{AddToken: &tok})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent AddToken g%d: %v", i, err)
		}
	}
	got := mustGet(t, st, b.Name)
	ids := tokenIDs(got.Tokens)
	slices.Sort(ids)
	want := make([]string, n)
	for i := range n {
		want[i] = fmt.Sprintf("g%d", i)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("after %d concurrent AddToken: stored %v, want %v (an update was lost)", n, ids, want)
	}
	for _, tok := range got.Tokens {
		checkToken(t, "concurrent "+tok.ID, tok, token(tok.ID))
	}
}

// testWrappedKey: a key wrapped by a master key (WrappedKeySize bytes)
// round-trips byte for byte, given at creation and through BizUpdate.Key,
// as does a plain one set by BizUpdate.Key; a key of another length is
// refused and changes nothing.
func (s *suite) testWrappedKey(t *testing.T, st segment.Store) {
	wrapped := make([]byte, segment.WrappedKeySize)
	for i := range wrapped {
		wrapped[i] = byte(255 - i*5) // 0xff, 0x00 and bytes above 0x7f included
	}
	wrapped[1] = 0
	in := segment.Biz{Name: s.name("wrapped"), Obfuscate: true, Key: slices.Clone(wrapped)}
	created := create(t, st, in)
	for what, got := range map[string]segment.Biz{"CreateBiz": created, "GetBiz": mustGet(t, st, in.Name), "ListBiz": listed(t, st, in.Name)} {
		if !bytes.Equal(got.Key, wrapped) {
			t.Fatalf("%s: key %x, want the wrapped key %x", what, []byte(got.Key), wrapped)
		}
	}
	// Re-wrapped (same length, new bytes), then unwrapped to a plain key.
	rewrapped := slices.Clone(wrapped)
	slices.Reverse(rewrapped)
	plain := bytes.Repeat([]byte{0xa5}, segment.KeySize)
	for _, key := range [][]byte{rewrapped, plain} {
		upd, err := st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Key: slices.Clone(key)})
		if err != nil {
			t.Fatalf("UpdateBiz with a %d-byte key: %v", len(key), err)
		}
		for what, got := range map[string]segment.Biz{"UpdateBiz": upd, "GetBiz": mustGet(t, st, in.Name), "ListBiz": listed(t, st, in.Name)} {
			if !bytes.Equal(got.Key, key) {
				t.Fatalf("%s after setting a %d-byte key: %x, want %x", what, len(key), []byte(got.Key), key)
			}
		}
	}
	for _, n := range []int{segment.KeySize - 1, 20, segment.WrappedKeySize + 1} {
		_, err := st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Key: make([]byte, n)})
		wantErr(t, fmt.Sprintf("UpdateBiz with a %d-byte key", n), err, segment.ErrInvalid, "key")
		_, err = st.CreateBiz(ctx(t), segment.Biz{Name: s.name("badkey"), Key: make([]byte, n)})
		wantErr(t, fmt.Sprintf("CreateBiz with a %d-byte key", n), err, segment.ErrInvalid, "key")
	}
	if got := mustGet(t, st, in.Name); !bytes.Equal(got.Key, plain) {
		t.Fatalf("refused key updates changed the key: %x", []byte(got.Key))
	}
}
