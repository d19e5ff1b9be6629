package server

import (
	"context"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// CreateBizToken adds a client token to a business (admin).
func (h *handler) CreateBizToken(ctx context.Context, req *idl.CreateBizTokenRequest) (resp *idl.CreateBizTokenResponse, err error) {
	defer h.done("CreateBizToken", "", time.Now(), &err)
	return nil, &idl.IdgenError{Code: idl.ErrorCode_INTERNAL, Message: "not yet"}
}

// RevokeBizToken removes a client token of a business (admin).
func (h *handler) RevokeBizToken(ctx context.Context, req *idl.RevokeBizTokenRequest) (resp *idl.RevokeBizTokenResponse, err error) {
	defer h.done("RevokeBizToken", "", time.Now(), &err)
	return nil, &idl.IdgenError{Code: idl.ErrorCode_INTERNAL, Message: "not yet"}
}
