package main

import (
	"errors"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/kerrors"

	"github.com/idgen/idgen/client"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestGetRetries: idctl get retries through the client package what is
// safe to retry: typed retryable refusals (after their retry_after_ms),
// refused connections, and timed-out calls (a lost reply leaves a gap on
// UNORDERED/SNOWFLAKE, and an ORDERED call keeps its request_id, so the
// server replays the stored range); never a caller mistake.
func TestGetRetries(t *testing.T) {
	for _, tc := range []struct {
		err   error
		again bool
		wait  time.Duration
	}{
		{&idl.IdgenError{Code: idl.ErrorCode_WORKER_UNAVAILABLE, Retryable: true, RetryAfterMs: 300}, true, 300 * time.Millisecond},
		{&idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT}, false, 0},
		{kerrors.ErrGetConnection.WithCause(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")), true, 50 * time.Millisecond},
		{kerrors.ErrRPCTimeout.WithCause(errors.New("timeout=3s")), true, 50 * time.Millisecond},
	} {
		again, wait := client.Retryable(tc.err)
		if again != tc.again || wait != tc.wait {
			t.Errorf("%v: (%v, %v), want (%v, %v)", tc.err, again, wait, tc.again, tc.wait)
		}
	}
}

// TestBenchAbsorbsObfuscatedOutput: a business that answers in ids or
// codes (empty ranges) is counted, not reported as a bad response.
func TestBenchAbsorbsObfuscatedOutput(t *testing.T) {
	w := &benchWorker{}
	ids := &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: 77, Last: 77}, {First: 5, Last: 5}}, Count: 2}
	if err := w.absorb(ids, 0, 2); err != nil {
		t.Errorf("obfuscated IDs as single ranges: %v", err)
	}
	codes := &idl.NextIDsResponse{Codes: []string{"BGTR00", "AA5PM8", "F2MXEA"}, Count: 3}
	if err := w.absorb(codes, 0, 3); err != nil {
		t.Errorf("codes: %v", err)
	}
	if err := w.absorb(&idl.NextIDsResponse{Codes: []string{"BGTR00"}, Count: 1}, 0, 2); err == nil {
		t.Error("one code for two asked: want a bad response")
	}
}
