package server

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestE2E_BizOrderedMode: ordered_mode is read on CreateBiz (unset:
// gapless) and UpdateBiz (unset or empty: unchanged) and is in every
// answer: CreateBiz, UpdateBiz, GetBiz and ListBiz. An unknown mode is
// INVALID_ARGUMENT naming the choices and changes nothing.
func TestE2E_BizOrderedMode(t *testing.T) {
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	c := n.Client(t)
	ctx := context.Background()
	mode := func(what string, b *idl.Biz, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !b.IsSetOrderedMode() || b.GetOrderedMode() != want {
			t.Fatalf("%s: ordered_mode %v, want %q", what, b.OrderedMode, want)
		}
	}
	b, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "plain", Channel: ch(idl.Channel_ORDERED)})
	mode("CreateBiz without ordered_mode", b, err, "gapless")
	b, err = c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "fast", Channel: ch(idl.Channel_ORDERED), OrderedMode: ptr("cached")})
	mode("CreateBiz cached", b, err, "cached")
	b, err = c.GetBiz(ctx, &idl.GetBizRequest{Name: "fast"})
	mode("GetBiz", b, err, "cached")
	list, err := c.ListBiz(ctx, &idl.ListBizRequest{})
	if err != nil || len(list.Bizs) != 2 {
		t.Fatalf("ListBiz: %+v, %v", list, err)
	}
	for _, lb := range list.Bizs {
		want := map[string]string{"plain": "gapless", "fast": "cached"}[lb.Name]
		mode("ListBiz "+lb.Name, lb, nil, want)
	}
	b, err = c.UpdateBiz(ctx, &idl.UpdateBizRequest{Name: "fast", Step: ptr(int64(50))})
	mode("UpdateBiz of step", b, err, "cached")
	b, err = c.UpdateBiz(ctx, &idl.UpdateBizRequest{Name: "fast", OrderedMode: ptr("")})
	mode("UpdateBiz with an empty ordered_mode", b, err, "cached")
	b, err = c.UpdateBiz(ctx, &idl.UpdateBizRequest{Name: "fast", OrderedMode: ptr("gapless")})
	mode("UpdateBiz gapless", b, err, "gapless")

	_, err = c.UpdateBiz(ctx, &idl.UpdateBizRequest{Name: "fast", OrderedMode: ptr("fastest"), Step: ptr(int64(70))})
	ie := mustCode(t, "UpdateBiz ordered_mode fastest", err, idl.ErrorCode_INVALID_ARGUMENT)
	if !strings.Contains(ie.Message, "gapless") || !strings.Contains(ie.Message, "cached") {
		t.Errorf("UpdateBiz ordered_mode fastest: message %q does not name the choices", ie.Message)
	}
	b, err = c.GetBiz(ctx, &idl.GetBizRequest{Name: "fast"})
	mode("GetBiz after a refused update", b, err, "gapless")
	if b.Step != 50 {
		t.Errorf("a refused update changed step to %d", b.Step)
	}
	_, err = c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "bad", OrderedMode: ptr("Cached")})
	ie = mustCode(t, "CreateBiz ordered_mode Cached", err, idl.ErrorCode_INVALID_ARGUMENT)
	if !strings.Contains(ie.Message, "gapless") || !strings.Contains(ie.Message, "cached") {
		t.Errorf("CreateBiz ordered_mode Cached: message %q does not name the choices", ie.Message)
	}
	_, err = c.GetBiz(ctx, &idl.GetBizRequest{Name: "bad"})
	mustCode(t, "GetBiz of a refused business", err, idl.ErrorCode_UNKNOWN_BIZ)
}

// TestBizOrderedModeInvalid: the handler refuses an unknown mode before
// it reaches a store, naming the field and the choices.
func TestBizOrderedModeInvalid(t *testing.T) {
	tok := "admin-token-0123456789"
	h := &handler{adminToken: tok, m: newMetrics(), log: zap.NewNop()}
	_, err := h.CreateBiz(context.Background(), &idl.CreateBizRequest{Name: "m", OrderedMode: ptr("fast"), Token: &tok})
	ie := mustCode(t, "CreateBiz ordered_mode fast", err, idl.ErrorCode_INVALID_ARGUMENT)
	for _, want := range []string{"ordered_mode", "gapless", "cached"} {
		if !strings.Contains(ie.Message, want) {
			t.Errorf("CreateBiz: message %q does not name %q", ie.Message, want)
		}
	}
	_, err = h.UpdateBiz(context.Background(), &idl.UpdateBizRequest{Name: "m", OrderedMode: ptr("fast"), Token: &tok})
	ie = mustCode(t, "UpdateBiz ordered_mode fast", err, idl.ErrorCode_INVALID_ARGUMENT)
	if !strings.Contains(ie.Message, "gapless") || !strings.Contains(ie.Message, "cached") {
		t.Errorf("UpdateBiz: message %q does not name the choices", ie.Message)
	}
}
