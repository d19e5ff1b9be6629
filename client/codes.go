package client

import (
	"errors"
	"strconv"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// ErrorCode is the code of a server refusal: the IDL's ErrorCode values,
// so that a caller branches on a refusal without importing kitex_gen.
//
// Like syscall.Errno, an ErrorCode is both a value to compare and an error:
// the constants below are the sentinels of the refusal codes, for
// errors.Is on any error this package returns (a refusal is never
// returned bare: it comes inside an *Error, whose Is compares the code),
// and Code returns the code of an error for a switch:
//
//	_, err := c.Next(ctx, "order")
//	switch {
//	case errors.Is(err, client.ErrUnknownBiz): // create the business first
//	case errors.Is(err, client.ErrRateLimited): // back off
//	}
//	log.Warn("refused", zap.Stringer("code", client.Code(err)))
//
// Whether one refusal is worth retrying is the server's call, carried in
// the answer (Retryable reads it, and the client retries on its own within
// its budget). The notes on each code say what the server does today.
// Code 0 is not a refusal: Code returns it for an error that holds none.
type ErrorCode int32

// The refusal codes (the IDL's ErrorCode).
const (
	// ErrInvalidArgument: the request is wrong (a count above max_batch, a
	// channel the business does not serve, a reused request_id with another
	// sub key or count); do not retry it unchanged. Not retryable.
	// ErrInvalid is the client's own twin: the arguments were refused
	// before anything was sent, and that error carries no code.
	ErrInvalidArgument ErrorCode = 1
	// ErrUnknownBiz: the business does not exist; create it first
	// (idctl biz create). Not retryable.
	ErrUnknownBiz ErrorCode = 2
	// ErrClockRollback: the node's clock went backwards (SNOWFLAKE).
	// Retryable, on another node.
	ErrClockRollback ErrorCode = 3
	// ErrWorkerUnavailable: the node holds no worker slot right now
	// (starting, fenced, or its SNOWFLAKE generator stopped). Retryable.
	ErrWorkerUnavailable ErrorCode = 4
	// ErrSegmentUnavailable: the segment store cannot be reached and no
	// buffered IDs remain, the node is starting, or (ORDERED) the sub
	// key's shard is moving between owners. Retryable, except on a
	// cluster that has no segment store at all (--zk without --mysql: a
	// configuration, refused for good).
	ErrSegmentUnavailable ErrorCode = 5
	// ErrExhausted: the business's ID space is used up (or, SNOWFLAKE, its
	// time bits). Not retryable.
	ErrExhausted ErrorCode = 6
	// ErrRateLimited: the business exceeded its configured rate.
	// Retryable, after the answer's retry_after.
	ErrRateLimited ErrorCode = 7
	// ErrUnauthenticated: a token is required and none, or a wrong one,
	// was given (Config.Token, Config.TokenFile). Not retryable.
	ErrUnauthenticated ErrorCode = 8
	// ErrPermissionDenied: the request is not allowed: a plugin's policy
	// refused the caller or the request (the IDL also reserves it for a
	// valid token used for an operation it does not cover). Not retryable.
	ErrPermissionDenied ErrorCode = 9
	// ErrInternal: a bug or a node's misconfiguration; the node logged
	// the details. Not retryable.
	ErrInternal ErrorCode = 10
	// ErrClockJump: the node's clock jumped forward past its durable
	// high-water mark (SNOWFLAKE); one mark write away. Retryable.
	ErrClockJump ErrorCode = 11
)

// String is the IDL's name of the code, "UNKNOWN_BIZ", or "ErrorCode(N)"
// for a code this build does not know (0 included).
func (c ErrorCode) String() string {
	if s := idl.ErrorCode(c).String(); s != "<UNSET>" {
		return s
	}
	return "ErrorCode(" + strconv.Itoa(int(c)) + ")"
}

// Error is the code's name, so that a sentinel prints as the refusal.
func (c ErrorCode) Error() string { return "idgen: refused: " + c.String() }

// Code returns the refusal code err holds, wrapped or not: that of the
// server's IdgenError in it (in any error this package returns, and in an
// error of a plain Kitex client of the idgen service), or an ErrorCode
// sentinel wrapped in it. It returns 0 when err holds no refusal: nil, a
// transport failure, a context error, ErrClosed, ErrInvalid and the
// package's other own errors.
func Code(err error) ErrorCode {
	var ie *idl.IdgenError
	if errors.As(err, &ie) {
		return ErrorCode(ie.Code)
	}
	var c ErrorCode
	if errors.As(err, &c) {
		return c
	}
	return 0
}

// Is reports whether target is the ErrorCode of the refusal e holds: what
// makes errors.Is(err, ErrRateLimited) true for a call refused with
// RATE_LIMITED, also when the retry budget ran out on it.
func (e *Error) Is(target error) bool {
	c, ok := target.(ErrorCode)
	return ok && c != 0 && Code(e.Err) == c
}
