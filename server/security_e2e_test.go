package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// mustCode fails unless err is an IdgenError with code.
func mustCode(t *testing.T, what string, err error, code idl.ErrorCode) *idl.IdgenError {
	t.Helper()
	var ie *idl.IdgenError
	if !errors.As(err, &ie) || ie.Code != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
	return ie
}

// TestE2E_BusinessTokens: a business with its own tokens serves only
// callers holding one of them (not the shared client token); two tokens
// are valid at once (rotation); a revoked one is refused by the node
// within the business cache's lifetime; the store and the answers never
// carry the secret.
func TestE2E_BusinessTokens(t *testing.T) {
	dir := t.TempDir()
	shared := testnode.NewToken()
	n := testnode.Start(t, testnode.Options{DataDir: dir, Args: []string{"--client-token-file", testnode.WriteTokenFile(t, t.TempDir(), "client", shared)}})
	c := n.Client(t)
	ctx := context.Background()
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "pay"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "open"}); err != nil {
		t.Fatal(err)
	}
	next := func(biz, tok string) error {
		req := &idl.NextIDsRequest{Biz: biz, Count: 1}
		if tok != "" {
			req.Token = &tok
		}
		_, err := c.NextIDs(ctx, req)
		return err
	}
	// Before any business token: the shared rule.
	if err := next("pay", shared); err != nil {
		t.Fatalf("shared token before business tokens: %v", err)
	}
	mustCode(t, "no token", next("pay", ""), idl.ErrorCode_UNAUTHENTICATED)

	t1, err := c.CreateBizToken(ctx, &idl.CreateBizTokenRequest{Biz: "pay", Label: str("checkout")})
	if err != nil {
		t.Fatal(err)
	}
	t2, err := c.CreateBizToken(ctx, &idl.CreateBizTokenRequest{Biz: "pay", Label: str("checkout-next")})
	if err != nil {
		t.Fatal(err)
	}
	// The cache of this node was invalidated by the change: at once.
	for _, tok := range []string{t1.Secret, t2.Secret} {
		if err := next("pay", tok); err != nil {
			t.Fatalf("a valid business token: %v", err)
		}
	}
	mustCode(t, "shared token on a business with its own", next("pay", shared), idl.ErrorCode_UNAUTHENTICATED)
	mustCode(t, "another business's token", next("open", t1.Secret), idl.ErrorCode_UNAUTHENTICATED)
	if err := next("open", shared); err != nil {
		t.Fatalf("a business without tokens keeps the shared rule: %v", err)
	}
	// Listed without secrets.
	b, err := c.GetBiz(ctx, &idl.GetBizRequest{Name: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Tokens) != 2 || b.Tokens[0].Id != t1.Info.Id || b.Tokens[0].Label != "checkout" {
		t.Fatalf("tokens listed: %+v", b.Tokens)
	}
	left, err := c.RevokeBizToken(ctx, &idl.RevokeBizTokenRequest{Biz: "pay", Id: t1.Info.Id})
	if err != nil || left.Remaining != 1 {
		t.Fatalf("revoke: %+v, %v", left, err)
	}
	mustCode(t, "revoked token", next("pay", t1.Secret), idl.ErrorCode_UNAUTHENTICATED)
	if err := next("pay", t2.Secret); err != nil {
		t.Fatalf("the remaining token: %v", err)
	}
	_, err = c.RevokeBizToken(ctx, &idl.RevokeBizTokenRequest{Biz: "pay", Id: t1.Info.Id})
	mustCode(t, "revoking twice", err, idl.ErrorCode_INVALID_ARGUMENT)
	// Without the admin token the token RPCs are refused.
	bare := n.BareClient(t)
	_, err = bare.CreateBizToken(ctx, &idl.CreateBizTokenRequest{Biz: "pay"})
	mustCode(t, "CreateBizToken without the admin token", err, idl.ErrorCode_UNAUTHENTICATED)
	// The embedded store holds hashes only.
	n.Kill()
	raw, err := os.ReadFile(filepath.Join(dir, "idgen.db"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), t2.Secret) || strings.Contains(string(raw), t2.Secret[len(t2.Secret)-20:]) {
		t.Fatal("the store holds a token secret")
	}
}

// TestE2E_IDQuota: a business's IDs-per-second quota refuses a caller that
// asks for more, with RATE_LIMITED and a retry hint, and counts it per
// business; a request above the burst is a caller mistake.
func TestE2E_IDQuota(t *testing.T) {
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	c := n.Client(t)
	ctx := context.Background()
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "bulk", IdQuota: ptr(int64(100)), IdBurst: ptr(int64(1000))}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "bulk", Count: 1000}); err != nil {
		t.Fatalf("the burst: %v", err)
	}
	_, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "bulk", Count: 1000})
	ie := mustCode(t, "over the quota", err, idl.ErrorCode_RATE_LIMITED)
	if !ie.Retryable || ie.RetryAfterMs <= 0 {
		t.Fatalf("over the quota: retryable %v retry_after_ms %d, want a retry hint", ie.Retryable, ie.RetryAfterMs)
	}
	_, err = c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "bulk", Count: 1001})
	mustCode(t, "above the burst", err, idl.ErrorCode_INVALID_ARGUMENT)
	_, body, err := n.Get(ctx, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`idgen_rate_limited_total\{biz="bulk",limit="ids"\} [1-9]`).MatchString(body) {
		t.Fatalf("/metrics has no idgen_rate_limited_total for bulk/ids:\n%s", grepLines(body, "rate_limited"))
	}
	b, err := c.GetBiz(ctx, &idl.GetBizRequest{Name: "bulk"})
	if err != nil || b.GetIdQuota() != 100 || b.GetIdBurst() != 1000 {
		t.Fatalf("GetBiz: quota %d burst %d, %v", b.GetIdQuota(), b.GetIdBurst(), err)
	}
}

// TestE2E_BoundedAutoCreation: unknown names create businesses only up to
// auto_create_max; the store, ListBiz and /metrics stay bounded, and
// ListBiz answers in pages that fit a frame.
func TestE2E_BoundedAutoCreation(t *testing.T) {
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--auto-create-max", "30", "--metrics-max-bizs", "5"}})
	c := n.Client(t)
	ctx := context.Background()
	created, refused := 0, 0
	for i := range 60 {
		name := fmt.Sprintf("auto%03d", i)
		var err error
		// At most five creations per second: wait as told and try again.
		for try := 0; try < 100; try++ {
			_, err = c.NextIDs(ctx, &idl.NextIDsRequest{Biz: name, Channel: ch(idl.Channel_UNORDERED), Count: 1})
			var ie *idl.IdgenError
			if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_RATE_LIMITED {
				break
			}
			time.Sleep(time.Duration(max(ie.RetryAfterMs, 1)) * time.Millisecond)
		}
		var ie *idl.IdgenError
		switch {
		case err == nil:
			created++
		case errors.As(err, &ie) && ie.Code == idl.ErrorCode_UNKNOWN_BIZ:
			if !strings.Contains(ie.Message, "idctl biz create") {
				t.Fatalf("cap refusal does not name the fix: %s", ie.Message)
			}
			refused++
		default:
			t.Fatalf("%s: %v", name, err)
		}
	}
	if created != 30 || refused != 30 {
		t.Fatalf("created %d, refused %d: want 30 and 30 (auto_create_max 30)", created, refused)
	}
	// Pages of 7 cover every business once, in order.
	var names []string
	after := ""
	for page := 0; page < 10; page++ {
		resp, err := c.ListBiz(ctx, &idl.ListBizRequest{After: &after, Limit: ptr(int32(7))})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range resp.Bizs {
			names = append(names, b.Name)
		}
		if resp.GetNext() == "" {
			break
		}
		after = resp.GetNext()
	}
	if len(names) != 30 || names[0] != "auto000" || names[29] != "auto029" {
		t.Fatalf("paged ListBiz: %d names %v", len(names), names)
	}
	_, err := c.ListBiz(ctx, &idl.ListBizRequest{Limit: ptr(int32(5000))})
	mustCode(t, "a page above 1000", err, idl.ErrorCode_INVALID_ARGUMENT)
	// Per-business series: at most 5 names plus _other.
	_, body, err := n.Get(ctx, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]bool{}
	for _, m := range regexp.MustCompile(`idgen_segment_step\{biz="([^"]+)"\}`).FindAllStringSubmatch(body, -1) {
		labels[m[1]] = true
	}
	if len(labels) == 0 || len(labels) > 5 {
		t.Fatalf("idgen_segment_step series for %d businesses, want 1..5: %v", len(labels), labels)
	}
	if !strings.Contains(body, `idgen_segment_business_load_failures_total{biz="_other"}`) {
		t.Fatalf("no _other series:\n%s", grepLines(body, "load_failures"))
	}
}

// TestE2E_MasterKey: with --master-key-file the embedded store holds the
// business keys wrapped; the same node decodes and issues the same
// obfuscated numbers after a restart; a node started without the master
// key refuses the obfuscated business, naming the fix, and serves the
// others.
func TestE2E_MasterKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(t.TempDir(), "master.key")
	if err := os.WriteFile(keyFile, []byte(testnode.NewToken()+testnode.NewToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	token := testnode.NewToken()
	opts := testnode.Options{DataDir: dir, AdminToken: token, Args: []string{"--master-key-file", keyFile}}
	n := testnode.Start(t, opts)
	c := n.Client(t)
	ctx := context.Background()
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "secret", Channel: ch(idl.Channel_UNORDERED), Obfuscate: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	first := obfuscated(t, c, "secret")
	d, err := c.Decode(ctx, &idl.DecodeRequest{Biz: "secret", Value: fmt.Sprint(first)})
	if err != nil || d.Number != 1 {
		t.Fatalf("decode %d: %+v, %v", first, d, err)
	}
	n.Kill()

	// Without the master key: the business is refused, naming the fix.
	plain := testnode.Start(t, testnode.Options{DataDir: dir, AdminToken: token})
	pc := plain.Client(t)
	_, err = pc.NextIDs(ctx, &idl.NextIDsRequest{Biz: "secret", Count: 1})
	ie := mustCode(t, "obfuscated business without the master key", err, idl.ErrorCode_INTERNAL)
	if !strings.Contains(ie.Message, "master-key-file") {
		t.Fatalf("refusal does not name --master-key-file: %s", ie.Message)
	}
	if _, err := pc.NextIDs(ctx, &idl.NextIDsRequest{Biz: "other", Count: 1}); err != nil {
		t.Fatalf("a plain business without the master key: %v", err)
	}
	plain.Kill()

	// With it again: the same mapping.
	n = testnode.Start(t, opts)
	c = n.Client(t)
	d, err = c.Decode(ctx, &idl.DecodeRequest{Biz: "secret", Value: fmt.Sprint(first)})
	if err != nil || d.Number != 1 {
		t.Fatalf("decode after restart %d: %+v, %v", first, d, err)
	}
}

func obfuscated(t *testing.T, c idgensvc.Client, biz string) int64 {
	t.Helper()
	resp, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: biz, Count: 1})
	if err != nil || len(resp.Ids) != 1 {
		t.Fatalf("NextIDs %s: %+v, %v", biz, resp, err)
	}
	return resp.Ids[0]
}

// TestSlowOrderedNotADefaultChannel: SLOW_ORDERED as a business's default
// is refused naming ORDERED, not reported as an unknown channel.
func TestSlowOrderedNotADefaultChannel(t *testing.T) {
	tok := "admin-token-0123456789"
	h := &handler{adminToken: tok, m: newMetrics(), log: zap.NewNop()}
	_, err := h.CreateBiz(context.Background(), &idl.CreateBizRequest{Name: "legacy", Channel: ch(idl.Channel_SLOW_ORDERED), Token: &tok})
	ie := mustCode(t, "CreateBiz with channel 3", err, idl.ErrorCode_INVALID_ARGUMENT)
	if !strings.Contains(ie.Message, "1 (ORDERED)") || strings.Contains(ie.Message, "unknown") || strings.Contains(ie.Message, "out of range") {
		t.Fatalf("message %q", ie.Message)
	}
	_, err = h.UpdateBiz(context.Background(), &idl.UpdateBizRequest{Name: "legacy", Channel: ch(idl.Channel_SLOW_ORDERED), Token: &tok})
	mustCode(t, "UpdateBiz with channel 3", err, idl.ErrorCode_INVALID_ARGUMENT)
}
