package main

import (
	"context"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// Decode is not served by the no-op server.
func (n *noop) Decode(ctx context.Context, req *idl.DecodeRequest) (*idl.DecodeResponse, error) {
	return nil, &idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT, Message: "noop: Decode is not served"}
}
