// Package segment hands out IDs from number ranges reserved in a durable
// Store: the UNORDERED channel (double-buffered segments per business) and
// the ORDERED channel (one reservation per request per (business, sub key)).
//
// Stores live in their own packages (boltstore for the embedded standalone
// store, mysqlstore for MySQL/MariaDB) and share the Store interface and the
// conformance suite in storetest.
package segment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Channel mirrors the IDL's Channel enum without depending on Kitex types.
type Channel int8

// Channels, numbered as in the IDL (and the older Java service).
const (
	ChannelUnordered Channel = 0
	ChannelOrdered   Channel = 1
	ChannelSnowflake Channel = 2
)

// String returns the lowercase channel name used in config, CLI and metrics.
func (c Channel) String() string {
	switch c {
	case ChannelUnordered:
		return "unordered"
	case ChannelOrdered:
		return "ordered"
	case ChannelSnowflake:
		return "snowflake"
	}
	return "unknown"
}

// Range is an inclusive range of numbers First..Last.
type Range struct {
	First, Last int64
}

// Len returns the number of IDs in r.
func (r Range) Len() int64 { return r.Last - r.First + 1 }

// Biz is a business's settings.
type Biz struct {
	Name        string
	Channel     Channel // default channel when a request does not say
	Step        int64   // starting UNORDERED segment size (it adapts at run time)
	LowWaterPct int     // refill when the current segment is down to this % left
	StartNum    int64   // first UNORDERED and ORDERED number (>= 1)
	Fallback    bool    // SNOWFLAKE may fall back to the UNORDERED segment
	RateLimit   int     // requests per second per node, 0 = unlimited
	// IDQuota is the IDs per second one node hands out for the business
	// (0 = unlimited): RateLimit counts requests, so one caller asking for
	// 10,000 IDs at a time would pass it with the node's whole capacity.
	IDQuota int64
	// IDBurst is how many IDs the quota lets through at once (0: IDQuota).
	IDBurst     int64
	Description string
	// Tokens are the business's own client credentials, stored hashed.
	// A business with tokens requires one of them on NextIDs; the shared
	// client token does not open it. More than one may be valid at once
	// (rotation: add the new one, move the callers, revoke the old).
	Tokens []BizToken
	// Obfuscate maps each number through the business's keyed bijection
	// (issuer/obfuscate) before handing it out.
	Obfuscate bool
	// Format is int (64-bit IDs) or code (short base32 strings).
	Format Format
	// CodeMinLength is the shortest code (FormatCode), 0..MaxCodeMinLength.
	CodeMinLength int
	// OrderedMode is how ORDERED numbers are persisted by the shard's
	// owner: gapless (durable per answer) or cached (reserved ahead).
	// It may change at any time.
	OrderedMode OrderedMode
	// Plugins are the names of the plugins run for this business, in the
	// order of their Order values.
	Plugins []string
	// Channels are the channels the business serves, Channel among them
	// (sorted, SLOW_ORDERED listed as ORDERED); a request for another is
	// refused. See Serves for the rule that keeps outputs from colliding.
	Channels []Channel
	// Key is the secret of the obfuscation, generated at creation. It is
	// never sent by the admin RPCs nor logged (SecretKey redacts itself).
	// It is either the plain key (KeySize bytes) or the key wrapped by the
	// nodes' master key (WrappedKeySize bytes, see issuer/keywrap); stores
	// keep the bytes as they are given.
	Key SecretKey
	// Issued is set (for good) before the business's first number is handed
	// out; from then on Obfuscate, Format and CodeMinLength are locked.
	Issued    bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Defaults for Biz fields left zero at creation.
const (
	DefaultStep        = 1000
	DefaultLowWaterPct = 20
	DefaultStartNum    = 1
	MaxStep            = 100_000_000
)

// BizUpdate lists the fields to change; nil pointers keep the old value.
// StartNum cannot change after creation.
type BizUpdate struct {
	Channel     *Channel
	Step        *int64
	LowWaterPct *int
	Fallback    *bool
	RateLimit   *int
	Description *string
	// Output settings: refused with ErrOutputLocked once Issued, unless
	// unchanged.
	Obfuscate     *bool
	Format        *Format
	CodeMinLength *int
	Plugins       *[]string
	// Issued can only be set to true (the issuer does, before issuing).
	Issued  *bool
	IDQuota *int64
	IDBurst *int64
	// OrderedMode may change at any time (it changes what a crash costs,
	// never uniqueness or order).
	OrderedMode *OrderedMode
	// AddToken adds a client token (its ID must be new; at most
	// MaxBizTokens); RevokeToken removes the token with that ID
	// (ErrInvalid when there is none). Both apply inside the store's
	// read-modify-write, so concurrent rotations never lose one.
	AddToken    *BizToken
	RevokeToken *string
	// Channels replaces the channel list (the default channel is always
	// added). Without it, a new Channel replaces the old default in a
	// one-channel list and joins a longer one.
	Channels *[]Channel
	// Key replaces the stored key bytes. Only for wrapping the same key
	// (plain to wrapped, or re-wrapped under a new master key): the
	// caller guarantees it opens to the same plain key, since outputs
	// already handed out depend on it.
	Key SecretKey
}

// BizToken is one client credential of a business. Only a hash of the
// secret is kept: the secret is shown once, when the token is created.
//
// The JSON form is how every store keeps it (boltstore and zkstore inside
// the business record, mysqlstore in biz.tokens): the hash in base64,
// never a secret.
type BizToken struct {
	ID        string    `json:"id"`              // public, names the token in idctl and logs
	Label     string    `json:"label,omitempty"` // free text: who holds it
	Hash      []byte    `json:"hash"`            // SHA-256 of the secret (secrets are 256-bit random, so a fast hash is enough)
	CreatedAt time.Time `json:"created_at"`      // UTC (NormalizeBiz and ApplyBizUpdate convert it)
}

// OrderedRequest reserves Count consecutive numbers for (Biz, SubKey).
type OrderedRequest struct {
	Biz    string
	SubKey string
	Count  int64
	// StartNum is the first number of a (Biz, SubKey) row created by this
	// request (the business's StartNum).
	StartNum int64
	// RequestID, when not empty, makes the request idempotent: a retry with
	// the same (Biz, RequestScope, RequestID), sub key and count returns
	// the range of the first success.
	RequestID string
	// RequestScope is the fingerprint of the credential the request
	// carried (RequestID.Scope): request ids of different scopes never
	// meet, so one caller can neither replay another's range nor claim
	// an id another will use.
	RequestScope string
	// Above is the highest number of (Biz, SubKey) the caller knows was
	// handed out (0: none known). A new reservation always starts above
	// it: a store whose counter is lower (it went backwards, e.g. a
	// failover to a lagging replica) raises the counter first, in the same
	// atomic operation as the reservation and the request id, and reports
	// Raised. So the range stored for a request id is never one the
	// caller's guard would refuse, and a retry cannot replay one.
	Above int64
	// Fence, when set, is called by the store after reserving and before
	// the reservation commits; an error aborts it (nothing is stored for
	// the request id; the store returns the error wrapped). Where the
	// store cannot undo the reservation (a single auto-committed
	// statement) the numbers become a gap, never an answer. The ORDERED
	// processor uses it to drop reservations made on a MySQL server the
	// cluster has not yet repaired after a failover.
	Fence func() error
}

// RequestID names an ORDERED request for idempotency: a retry with the
// same ID and Scope (and the same business, sub key and count) gets the
// range of the first success back.
//
// ID is what the caller sent. Scope is the fingerprint of the credential
// the request carried (issuer.RequestScope), "" without one: ids are
// scoped to the caller, so a second caller who reuses an id gets a range
// of its own, never the first caller's, and cannot make the first
// caller's later use of the id fail. Callers without a credential share
// one scope per business (there is nothing to tell them apart by).
type RequestID struct {
	ID, Scope string
}

// StoredRequestID is the key under which a store keeps request id id of
// scope: id itself without a scope (as before scopes existed, so rows an
// older build wrote keep replaying and an older build never reads a
// scoped row), else NUL, scope, NUL, id. No unscoped id equals a scoped
// key (ids may not begin with NUL: ValidateRequestID) and two scoped keys
// are equal only for the same scope and id (scopes hold no NUL).
func StoredRequestID(scope, id string) string {
	if scope == "" {
		return id
	}
	return "\x00" + scope + "\x00" + id
}

// SplitStoredRequestID reverses StoredRequestID.
func SplitStoredRequestID(stored string) (scope, id string) {
	if rest, ok := strings.CutPrefix(stored, "\x00"); ok {
		if scope, id, ok = strings.Cut(rest, "\x00"); ok {
			return scope, id
		}
	}
	return "", stored
}

// Store is the durable state behind segments and businesses. Every
// reservation is durable before it returns: a crash after a reservation
// never hands its numbers out again.
type Store interface {
	// ReserveSegment advances the business's UNORDERED counter by step in one
	// atomic operation and returns the reserved range (old+1 .. old+step).
	// ErrUnknownBiz if the business does not exist.
	ReserveSegment(ctx context.Context, biz string, step int64) (Range, error)
	// ReserveOrdered reserves req.Count numbers for (req.Biz, req.SubKey),
	// creating the row on first use, in one atomic operation.
	ReserveOrdered(ctx context.Context, req OrderedRequest) (Range, error)

	CreateBiz(ctx context.Context, b Biz) (Biz, error) // ErrBizExists
	UpdateBiz(ctx context.Context, name string, u BizUpdate) (Biz, error)
	GetBiz(ctx context.Context, name string) (Biz, error) // ErrUnknownBiz
	ListBiz(ctx context.Context) ([]Biz, error)

	Close() error
}

// Errors returned by stores and processors, wrapped with context; test them
// with errors.Is.
var (
	ErrUnknownBiz = errors.New("unknown business")
	ErrBizExists  = errors.New("business already exists")
	// ErrInvalid: the request or settings are malformed (message says which field).
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable: the store cannot be reached or did not answer in time,
	// and nothing buffered can serve the request. Retryable.
	ErrUnavailable = errors.New("segment store unavailable")
	// ErrExhausted: the business's number space is used up (for example a
	// segment would cross the snowflake floor).
	ErrExhausted = errors.New("id space exhausted")
	// ErrRegressed: the store returned a range not above one already
	// received (a failover to a lagging replica); refused, never handed out.
	ErrRegressed = errors.New("segment store went backwards")
	// ErrRequestMismatch: a request id was reused for a different request
	// (another sub key or count). Wrap it with RequestMismatch's message,
	// which names neither.
	ErrRequestMismatch = errors.New("request_id already used by a different request")
	// ErrNoSegments: this deployment has no store that can reserve numbers
	// shared by every node (a ZooKeeper-only cluster keeps businesses in
	// ZooKeeper but no counters). UNORDERED, ORDERED and snowflake fallback
	// are refused; the message names the fix (--mysql). Not retryable.
	ErrNoSegments = errors.New("no shared segment store")
)

// RequestMismatch is the refusal of a request id reused for another
// request. It names neither that request's sub key nor its count: without
// a credential a business's callers share request ids, so those may be
// someone else's; and the message reaches the node's status page.
func RequestMismatch() error {
	return fmt.Errorf("%w (another sub key or count): use a new request_id for a new request", ErrRequestMismatch)
}
