package issuer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/worker"
)

const sharedToken = "shared-client-token-0123456789"

// TestBizTokens: a business with tokens of its own accepts each of them
// (two at once: rotation) and refuses no token, the shared client token, a
// made-up token, a token with a known ID but a wrong secret, and a revoked
// token; refusals wrap ErrUnauthenticated and never echo the token.
func TestBizTokens(t *testing.T) {
	f := newIssuer(t, func(c *Config) { c.ClientToken = sharedToken })
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "tok", Channel: segment.ChannelUnordered}); err != nil {
		t.Fatal(err)
	}
	next := func(token string) error {
		_, err := f.is.Next(ctx, Request{Biz: "tok", Count: 1, Token: token})
		return err
	}
	if err := next(sharedToken); err != nil {
		t.Fatalf("before it has tokens, the business takes the shared token: %v", err)
	}
	t1, s1, err := f.is.CreateBizToken(ctx, "tok", "billing service")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^idgt_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$`).MatchString(s1) || !strings.HasPrefix(s1, TokenPrefix+t1.ID+"_") {
		t.Fatalf("secret %q (id %q) does not have the documented form", s1, t1.ID)
	}
	if t1.Label != "billing service" || len(t1.Hash) != 32 || t1.CreatedAt.IsZero() {
		t.Fatalf("token %+v", t1)
	}
	stored, _ := f.is.GetBiz(ctx, "tok")
	if h := sha256.Sum256([]byte(s1)); len(stored.Tokens) != 1 || !bytes.Equal(stored.Tokens[0].Hash, h[:]) {
		t.Fatalf("stored tokens %+v", stored.Tokens)
	}
	t2, s2, err := f.is.CreateBizToken(ctx, "tok", "billing service, next key")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{s1, s2} {
		if err := next(s); err != nil {
			t.Errorf("valid token refused: %v", err)
		}
	}
	wrongSecret := TokenPrefix + t1.ID + "_" + strings.Repeat("A", 43)
	for name, tok := range map[string]string{"none": "", "shared": sharedToken, "made up": "idgt_000000000000_xyz",
		"known id, wrong secret": wrongSecret, "truncated": s1[:len(s1)-1]} {
		err := next(tok)
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), `business "tok" requires one of its own tokens`) {
			t.Errorf("%s: %v, want ErrUnauthenticated naming the business's tokens", name, err)
		}
		if tok != "" && err != nil && strings.Contains(err.Error(), tok) {
			t.Errorf("%s: the error echoes the token: %v", name, err)
		}
	}
	left, err := f.is.RevokeBizToken(ctx, "tok", t1.ID)
	if err != nil || left != 1 {
		t.Fatalf("revoke: %d left, %v", left, err)
	}
	if err := next(s1); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("revoked token: %v, want ErrUnauthenticated", err)
	}
	if err := next(s2); err != nil {
		t.Errorf("remaining token: %v", err)
	}
	if _, err := f.is.RevokeBizToken(ctx, "tok", t1.ID); !errors.Is(err, segment.ErrInvalid) {
		t.Errorf("revoking twice: %v, want ErrInvalid", err)
	}
	if left, err := f.is.RevokeBizToken(ctx, "tok", t2.ID); err != nil || left != 0 {
		t.Fatalf("revoke the last: %d left, %v", left, err)
	}
	if err := next(sharedToken); err != nil {
		t.Errorf("with no tokens left, the shared rule applies again: %v", err)
	}
	if _, _, err := f.is.CreateBizToken(ctx, "absent", ""); !errors.Is(err, segment.ErrUnknownBiz) {
		t.Errorf("token for an unknown business: %v", err)
	}
}

// TestSharedClientToken: a business without tokens takes the shared client
// token when one is configured (and nothing else), and anything when none
// is; an unknown business is not auto-created for a caller without it.
func TestSharedClientToken(t *testing.T) {
	f := newIssuer(t, func(c *Config) { c.ClientToken = sharedToken })
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "open", Channel: segment.ChannelUnordered}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "wrong", sharedToken + "x", sharedToken[:10]} {
		_, err := f.is.Next(ctx, Request{Biz: "open", Count: 1, Token: tok})
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "the client token is required") {
			t.Errorf("token %q: %v, want ErrUnauthenticated", tok, err)
		}
	}
	if _, err := f.is.Next(ctx, Request{Biz: "open", Count: 1, Token: sharedToken}); err != nil {
		t.Errorf("shared token: %v", err)
	}

	// Auto-creation: refused without the token, before anything is stored.
	_, err := f.is.Next(ctx, Request{Biz: "invented", Count: 1, Token: "wrong"})
	if !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("auto-creation with a wrong token: %v, want ErrUnauthenticated", err)
	}
	if _, err := f.is.GetBiz(ctx, "invented"); !errors.Is(err, segment.ErrUnknownBiz) {
		t.Fatalf("the business was created for a caller without the token: %v", err)
	}
	f.is.Acquired(worker.Slot{Node: 1, Worker: 1, HighWater: t0.UnixMilli() + 60_000})
	if _, err := f.is.Next(ctx, Request{Biz: "invented", Count: 1, Token: sharedToken}); err != nil {
		t.Fatalf("auto-creation with the token: %v", err)
	}

	// Without auto-creation, an unknown business is not revealed to a
	// caller without the token either.
	h := newIssuer(t, func(c *Config) { c.ClientToken = sharedToken; c.AutoCreateBiz = false })
	if _, err := h.is.Next(ctx, Request{Biz: "unknown", Count: 1}); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("unknown business, no token: %v, want ErrUnauthenticated", err)
	}
	if _, err := h.is.Next(ctx, Request{Biz: "unknown", Count: 1, Token: sharedToken}); !errors.Is(err, segment.ErrUnknownBiz) {
		t.Errorf("unknown business, with the token: %v, want ErrUnknownBiz", err)
	}

	g := newIssuer(t, nil) // no shared token: no check
	if _, err := g.is.CreateBiz(ctx, segment.Biz{Name: "open", Channel: segment.ChannelUnordered}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.is.Next(ctx, Request{Biz: "open", Count: 1, Token: "anything"}); err != nil {
		t.Errorf("no client token configured: %v", err)
	}
}

func benchToken(b *testing.B, withToken bool) {
	f := newIssuer(b, nil)
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "bench", Channel: segment.ChannelSnowflake}); err != nil {
		b.Fatal(err)
	}
	req := Request{Biz: "bench", Count: 1}
	if withToken {
		// A business at the token limit: the check picks the token by the
		// ID inside it, so the others cost nothing.
		for range segment.MaxBizTokens - 1 {
			if _, _, err := f.is.CreateBizToken(ctx, "bench", "other"); err != nil {
				b.Fatal(err)
			}
		}
		_, secret, err := f.is.CreateBizToken(ctx, "bench", "bench")
		if err != nil {
			b.Fatal(err)
		}
		req.Token = secret
	}
	// The fake clock moves only when the generator waits for the next
	// millisecond, so the high-water mark is never reached.
	f.is.Acquired(worker.Slot{Node: 1, Worker: 1, HighWater: t0.Add(365 * 24 * time.Hour).UnixMilli()})
	if _, err := f.is.Next(ctx, req); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := f.is.Next(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextNoToken / WithBizToken: one SNOWFLAKE ID per call for a
// business without tokens, and for one whose eight tokens are checked (a
// SHA-256 of the token and a constant-time compare per request).
func BenchmarkNextNoToken(b *testing.B)      { benchToken(b, false) }
func BenchmarkNextWithBizToken(b *testing.B) { benchToken(b, true) }
