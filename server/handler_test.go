package server

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/zap"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestHandlerPanicBecomesInternal: a panic inside a handler (here: a nil
// issuer) answers INTERNAL for that call and does not escape.
func TestHandlerPanicBecomesInternal(t *testing.T) {
	h := &handler{log: zap.NewNop(), m: newMetrics()}
	_, err := h.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "x", Count: 1})
	var ie *idl.IdgenError
	if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_INTERNAL {
		t.Fatalf("err = %v, want INTERNAL", err)
	}
}
