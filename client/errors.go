package client

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/kerrors"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// Errors of the client itself. Server refusals come back inside an *Error
// holding the server's IdgenError: errors.Is matches them against the
// ErrorCode sentinels (ErrUnknownBiz, ErrRateLimited, ...; codes.go), Code
// returns their code. Retryable answers for both kinds.
var (
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("idgen client: closed")
	// ErrNoNodes: no node is known (an empty static list cannot happen; a
	// cluster whose members are all gone from ZooKeeper can). Retryable.
	ErrNoNodes = errors.New("idgen client: no node known")
	// ErrRetryBudget: the call used Config.MaxAttempts attempts; the error
	// also wraps the last attempt's error.
	ErrRetryBudget = errors.New("idgen client: retry budget used up")
	// ErrInvalid: the call's arguments are wrong (not sent).
	ErrInvalid = errors.New("idgen client: invalid argument")
)

// Error is a call that failed: the last node asked, how many attempts were
// made, why the client stopped (Reason: ErrRetryBudget, a context error, or
// nil when Err itself was final) and the last error.
type Error struct {
	Addr     string
	Attempts int
	Reason   error
	Err      error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("idgen")
	if e.Addr != "" {
		b.WriteString(" " + e.Addr)
	}
	b.WriteString(": ")
	if e.Reason != nil {
		b.WriteString(e.Reason.Error())
		b.WriteString(" after " + strconv.Itoa(e.Attempts) + " attempt(s); last error: ")
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Reason and Err, so errors.Is and errors.As see both.
func (e *Error) Unwrap() []error {
	out := make([]error, 0, 2)
	if e.Reason != nil {
		out = append(out, e.Reason)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// transportPause is the wait Retryable suggests after a transport failure.
const transportPause = 50 * time.Millisecond

// Retryable reports whether a call that failed with err is worth making
// again (on any node) and how long to wait first. It answers for every
// error this package returns: server refusals (IdgenError's retryable and
// retry_after_ms), transport failures (connection refused or reset, RPC
// timeouts: retryable), ErrNoNodes and a deadline that passed (retryable),
// ErrClosed, ErrInvalid, a cancelled context and non-retryable refusals
// (not retryable).
func Retryable(err error) (bool, time.Duration) {
	if err == nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid) {
		return false, 0
	}
	if ok, d := retryable(err); ok {
		return true, d
	}
	var ie *idl.IdgenError
	switch {
	case errors.As(err, &ie):
		return false, 0
	case errors.Is(err, ErrNoNodes):
		return true, noNodesPause
	case errors.Is(err, context.DeadlineExceeded):
		return true, 0
	}
	return false, 0
}

// retryable classifies one attempt's error: a retryable refusal (with its
// retry_after) or a transport failure.
func retryable(err error) (bool, time.Duration) {
	var ie *idl.IdgenError
	if errors.As(err, &ie) {
		if !ie.Retryable {
			return false, 0
		}
		return true, time.Duration(ie.RetryAfterMs) * time.Millisecond
	}
	if isTransport(err) {
		return true, transportPause
	}
	return false, 0
}

// isTransport: the request did not get an answer. Whether it reached the
// server is unknown for a timeout or a reset; a retry is still safe (see
// the package doc: gaps on UNORDERED/SNOWFLAKE, the stored range on
// ORDERED through the request_id).
func isTransport(err error) bool {
	switch {
	case errors.Is(err, kerrors.ErrGetConnection), errors.Is(err, kerrors.ErrRemoteOrNetwork),
		errors.Is(err, kerrors.ErrNoConnection), kerrors.IsTimeoutError(err),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
