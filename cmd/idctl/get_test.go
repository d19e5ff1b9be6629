package main

import (
	"errors"
	"testing"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestRetryAfter: idctl get retries only what issued nothing (typed
// retryable refusals, refused connections), never a timed-out call.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		err   error
		again bool
		wait  time.Duration
	}{
		{&idl.IdgenError{Code: idl.ErrorCode_WORKER_UNAVAILABLE, Retryable: true, RetryAfterMs: 300}, true, 300 * time.Millisecond},
		{&idl.IdgenError{Code: idl.ErrorCode_CLOCK_ROLLBACK, Retryable: true, RetryAfterMs: 60_000}, true, time.Second},
		{&idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE, Retryable: true}, true, 20 * time.Millisecond},
		{&idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT}, false, 0},
		{errors.New("remote or network error: get connection error: dial tcp 127.0.0.1:1: connect: connection refused"), true, 50 * time.Millisecond},
		{errors.New("rpc timeout: timeout=3s"), false, 0},
	} {
		wait, again := retryAfter(tc.err)
		if again != tc.again || wait != tc.wait {
			t.Errorf("%v: (%v, %v), want (%v, %v)", tc.err, wait, again, tc.wait, tc.again)
		}
	}
}
