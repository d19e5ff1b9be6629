package server

import (
	"context"
	"time"

	"go.uber.org/zap"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// CreateBizToken adds a client token to a business (admin). The secret is
// in the answer only: the store keeps its SHA-256, so a reader of MySQL or
// ZooKeeper cannot call as the business.
func (h *handler) CreateBizToken(ctx context.Context, req *idl.CreateBizTokenRequest) (resp *idl.CreateBizTokenResponse, err error) {
	defer h.done("CreateBizToken", "", time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request: send a CreateBizTokenRequest with biz")
	}
	if err := h.admin(ctx, req.Token); err != nil {
		return nil, err
	}
	is, err := h.issuer(idl.ErrorCode_SEGMENT_UNAVAILABLE)
	if err != nil {
		return nil, err
	}
	t, secret, err := is.CreateBizToken(ctx, req.Biz, req.GetLabel())
	if err != nil {
		return nil, h.toIDLError(req.Biz, err)
	}
	// Never the secret in the log.
	h.log.Info("business token created", zap.String("biz", req.Biz), zap.String("token_id", t.ID), zap.String("label", t.Label),
		zap.String("caller", callerAddr(ctx)))
	return &idl.CreateBizTokenResponse{Info: &idl.BizToken{Id: t.ID, Label: t.Label, CreatedAtMs: msOrZero(t.CreatedAt)}, Secret: secret}, nil
}

// RevokeBizToken removes a client token of a business (admin). Every node
// refuses it once its business cache refreshes (2 s).
func (h *handler) RevokeBizToken(ctx context.Context, req *idl.RevokeBizTokenRequest) (resp *idl.RevokeBizTokenResponse, err error) {
	defer h.done("RevokeBizToken", "", time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request: send a RevokeBizTokenRequest with biz and id")
	}
	if err := h.admin(ctx, req.Token); err != nil {
		return nil, err
	}
	is, err := h.issuer(idl.ErrorCode_SEGMENT_UNAVAILABLE)
	if err != nil {
		return nil, err
	}
	left, err := is.RevokeBizToken(ctx, req.Biz, req.Id)
	if err != nil {
		return nil, h.toIDLError(req.Biz, err)
	}
	h.log.Info("business token revoked", zap.String("biz", req.Biz), zap.String("token_id", req.Id), zap.Int("remaining", left),
		zap.String("caller", callerAddr(ctx)))
	return &idl.RevokeBizTokenResponse{Remaining: int32(left)}, nil
}
