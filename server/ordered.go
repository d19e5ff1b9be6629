package server

import (
	"context"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// OrderedTake is the ORDERED channel's internal hop (see the IDL).
func (h *handler) OrderedTake(_ context.Context, _ *idl.OrderedTakeRequest) (*idl.OrderedTakeResponse, error) {
	return nil, &idl.IdgenError{Code: idl.ErrorCode_INTERNAL, Message: "OrderedTake is not wired yet"}
}

// OrderedOwners answers the shard-to-owner map.
func (h *handler) OrderedOwners(_ context.Context, _ *idl.OrderedOwnersRequest) (*idl.OrderedOwnersResponse, error) {
	return nil, &idl.IdgenError{Code: idl.ErrorCode_INTERNAL, Message: "OrderedOwners is not wired yet"}
}
