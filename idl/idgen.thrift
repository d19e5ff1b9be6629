// idgen RPC surface. Enum values of Channel match the older Java number
// service so that migrating clients keep their wire values. Every failure is an
// IdgenError exception with a code, so plain Apache Thrift clients in any
// language can tell a retryable condition from a caller mistake.
namespace go idgen
namespace java com.idgen.rpc

enum Channel {
    UNORDERED = 0, // unique, trend-increasing: MySQL/embedded segments, double-buffered
    ORDERED   = 1, // strictly increasing per (biz, sub_key) across the cluster
    SNOWFLAKE = 2, // time-ordered per node, decodable with ParseID
    SLOW_ORDERED = 3, // the older Java service's name for its MySQL strict channel: served exactly as ORDERED,
                      // answered with SLOW_ORDERED
}

enum ErrorCode {
    INVALID_ARGUMENT    = 1,  // the request is wrong; do not retry it unchanged
    UNKNOWN_BIZ         = 2,  // the business does not exist; create it first
    CLOCK_ROLLBACK      = 3,  // this node's clock went backwards; retry later or elsewhere
    WORKER_UNAVAILABLE  = 4,  // this node holds no worker slot right now (fenced, starting)
    SEGMENT_UNAVAILABLE = 5,  // the segment store cannot be reached and no buffered IDs remain
    EXHAUSTED           = 6,  // the ID space for this business is used up
    RATE_LIMITED        = 7,  // the business exceeded its configured rate
    UNAUTHENTICATED     = 8,  // a token is required and none (or a wrong one) was given
    PERMISSION_DENIED   = 9,  // the token is valid but not for this operation
    INTERNAL            = 10, // a bug or an unexpected failure; details are in the server log
    CLOCK_JUMP          = 11, // the clock jumped forward past the durable high-water mark; retry shortly (one mark write)
}

exception IdgenError {
    1: required ErrorCode code,
    2: required string message,
    3: optional bool retryable = false,
    4: optional i64 retry_after_ms = 0, // hint: how long to wait before retrying this node
}

// An inclusive range of IDs: first, first+1, ..., last.
struct IDRange {
    1: required i64 first,
    2: required i64 last,
}

struct NextIDsRequest {
    1: required string biz,
    2: optional Channel channel,    // unset: the business's default channel
    3: optional i32 count = 1,      // 1..max_batch; unset or 0 means 1; never clamped, refused whole when too large
    4: optional string sub_key,     // required for ORDERED
    5: optional string request_id,  // ORDERED only: a retry with the same id returns the same range
    6: optional string token,       // the business's own token if it has any, else the shared client token (if set)
    // Set by a node that forwards an ORDERED request to the shard's owner:
    // answer it here or refuse it, never forward it again. A client that
    // sets it gets a retryable SEGMENT_UNAVAILABLE from any node that does
    // not own the sub key's shard, nothing else.
    7: optional bool no_forward,
}

struct NextIDsResponse {
    1: required list<IDRange> ranges,
    2: required Channel channel,    // the channel that actually served
    3: required bool fallback,      // true when SNOWFLAKE was refused and a segment served instead
    4: required i64 count,          // total number of IDs (across ranges, or in ids or codes)
    // Businesses whose output is not a plain range (obfuscated IDs, codes)
    // get their values here, one per issued number, and an empty ranges.
    5: optional list<i64> ids,      // obfuscate on, format int
    6: optional list<string> codes, // format code: Crockford base32, see the README
}

struct ParseIDRequest {
    1: required i64 id,
    2: optional string token,       // the shared client token, when the server has one (or the admin token)
}

struct ParseIDResponse {
    1: required i64 id,
    2: required i64 timestamp_ms,   // Unix milliseconds
    3: required string time,        // RFC 3339 with milliseconds, UTC
    4: required i32 idc,
    5: required i32 node,
    6: required i32 worker,
    7: required i32 sequence,
    8: required bool below_floor,   // true: not a snowflake ID of this cluster (a segment/fallback ID)
}

struct ClockRequest {
    1: optional string token,       // the shared client token, when the server has one (or the admin token)
}

struct ClockResponse {
    1: required i64 now_ms,         // the node's wall clock, Unix milliseconds
    2: required string state,       // serving, clock_rollback, fenced, degraded, starting
    3: required string cluster,
    4: required i32 worker,         // -1 when no slot is held
    5: required string version,
}

struct ListWorkersRequest {
    1: optional i32 idc,
    2: optional string token,       // the shared client token, when the server has one (or the admin token)
}

struct Worker {
    1: required i32 idc,
    2: required i32 node,
    3: required i32 worker,
    4: required string host,
    5: required i32 port,
    6: required i32 pid,
    7: required string version,
    8: required i64 started_at_ms,
    9: required i64 heartbeat_ms,      // the slot's high-water mark as last written
    10: required i64 heartbeat_age_ms, // ZooKeeper's time minus the heartbeat znode's mtime
    11: required i64 clock_offset_ms,  // node clock minus ZooKeeper's clock at the last heartbeat
    12: required string member,        // member znode path
}

struct ListWorkersResponse {
    1: required string cluster,
    2: required list<Worker> workers,
}

struct Biz {
    1: required string name,
    2: required Channel channel,        // default channel when a request leaves it unset
    3: required i64 step,               // UNORDERED segment size (starting step; it adapts)
    4: required i32 low_water_pct,      // refill when the current segment falls to this % remaining
    5: required i64 start_num,          // first UNORDERED/ORDERED number
    6: required bool fallback,          // SNOWFLAKE may fall back to a segment
    7: required i32 rate_limit,         // requests per second per node; 0 = unlimited
    8: required string description,
    9: required i64 created_at_ms,
    10: required i64 updated_at_ms,
    11: optional bool obfuscate,         // outputs go through the business's keyed bijection
    12: optional string format,          // int or code
    13: optional i32 code_min_length,    // shortest code
    14: optional list<string> plugins,   // plugins run for this business, e.g. [audit, stats]
    15: optional bool issued,            // has issued: obfuscate, format, code_min_length are locked
    16: optional i64 id_quota,           // IDs per second per node; 0 = unlimited
    17: optional i64 id_burst,           // IDs the quota lets through at once
    18: optional list<BizToken> tokens,  // the business's own client tokens (never their secrets)
    19: optional string ordered_mode,    // gapless (durable per answer) or cached (reserved ahead); see the README
    20: optional list<Channel> channels, // the channels served (channel among them); requests on others are refused
    // The secret key is never sent.
}

// A business's client token as listed: never the secret, which is shown
// once, by CreateBizToken.
struct BizToken {
    1: required string id,
    2: required string label,
    3: required i64 created_at_ms,
}

struct CreateBizRequest {
    1: required string name,
    2: optional Channel channel,
    3: optional i64 step,
    4: optional i32 low_water_pct,
    5: optional i64 start_num,
    6: optional bool fallback,
    7: optional i32 rate_limit,
    8: optional string description,
    9: optional string token,
    10: optional bool obfuscate,
    11: optional string format,          // int (default) or code
    12: optional i32 code_min_length,
    13: optional list<string> plugins,
    14: optional i64 id_quota,
    15: optional i64 id_burst,
    16: optional string ordered_mode,    // gapless (default) or cached
    // The channels served (channel is added; SLOW_ORDERED counts as ORDERED).
    // Unset: channel alone. With channel unset, the first listed is the
    // default. An obfuscated or code business serves one channel, or
    // UNORDERED and SNOWFLAKE together (their numbers never meet).
    17: optional list<Channel> channels,
}

// Only the fields that are set change. start_num cannot change after creation.
struct UpdateBizRequest {
    1: required string name,
    2: optional Channel channel,
    3: optional i64 step,
    4: optional i32 low_water_pct,
    6: optional bool fallback,
    7: optional i32 rate_limit,
    8: optional string description,
    9: optional string token,
    // Output settings change only while the business has issued nothing.
    10: optional bool obfuscate,
    11: optional string format,
    12: optional i32 code_min_length,
    13: optional list<string> plugins,
    14: optional i64 id_quota,
    15: optional i64 id_burst,
    16: optional string ordered_mode,    // gapless (default) or cached
    // Replaces the channel list (channel is added). Unset with a new
    // channel: a business of one channel moves to the new one, a longer
    // list gains it. An obfuscated or code business that has issued keeps
    // its number space: UNORDERED and SNOWFLAKE, or its one other channel.
    17: optional list<Channel> channels,
}

struct GetBizRequest {
    1: required string name,
    2: optional string token,
}

// One page of businesses, in name order.
struct ListBizRequest {
    1: optional string token,
    2: optional string after,            // names after this one ("": from the start)
    3: optional i32 limit,               // page size, 1..1000; unset or 0: 100
}

struct ListBizResponse {
    1: required list<Biz> bizs,
    2: optional string next,             // pass as after for the next page; unset or "": this was the last
}

// Adds a client token to a business (admin). The secret is in the answer
// only: the server keeps a hash.
struct CreateBizTokenRequest {
    1: required string biz,
    2: optional string label,            // who holds it
    3: optional string token,            // the admin token
}

struct CreateBizTokenResponse {
    1: required BizToken info,
    2: required string secret,           // give this to the caller; it is not shown again
}

// Revokes one client token of a business (admin). Nodes stop accepting it
// within the business cache's lifetime (2 s).
struct RevokeBizTokenRequest {
    1: required string biz,
    2: required string id,
    3: optional string token,            // the admin token
}

struct RevokeBizTokenResponse {
    1: required i32 remaining,           // tokens the business still has (0: it is open to the shared client token rule again)
}

// Decode turns a business's output (an obfuscated ID or a code, as text)
// back into the number behind it (admin).
struct DecodeRequest {
    1: required string biz,
    2: required string value,
    3: optional string token,
}

struct DecodeResponse {
    1: required i64 number,               // the underlying number
    2: required string format,            // int or code
    3: required bool obfuscated,
    4: optional ParseIDResponse snowflake, // set when number is a snowflake ID of this cluster
}

// OrderedTake is the ORDERED hop of older nodes (before issue 30), kept for
// rolling upgrades: nodes now forward the caller's whole NextIDs request
// (no_forward set) to the shard's owner. It is served as NextIDs on channel
// ORDERED with no_forward: the same validation, max_batch, token, rate
// limit, ID quota, plugins and audit. A business whose output is not plain
// integers (obfuscated IDs, codes) is refused with INVALID_ARGUMENT: a range
// cannot carry it; send NextIDs.
struct OrderedTakeRequest {
    1: required string biz,
    2: required string sub_key,
    3: required i32 count,
    4: optional string request_id,
    5: optional string token,          // the original caller's token
}

struct OrderedTakeResponse {
    1: required IDRange range,
}

// The owner of one ORDERED shard (shard = Math.abs(sub_key.hashCode()) % 64,
// Java's String.hashCode over UTF-16).
struct ShardOwner {
    1: required i32 shard,
    2: required string addr,           // host:port of the owner's RPC port; empty while the shard has none
    3: required i64 epoch,
}

struct OrderedOwnersRequest {
    1: optional string token,          // the shared client token, when the server has one (or the admin token)
}

struct OrderedOwnersResponse {
    1: required list<ShardOwner> owners, // one per shard, 0..63
}

// The service is IDGenService (not IDGen) so that Kitex generates its client
// and server into kitex_gen/idgen/idgenservice, a package name distinct from
// the types package kitex_gen/idgen. The Thrift method names, and so the
// wire, are unchanged.
service IDGenService {
    NextIDsResponse NextIDs(1: NextIDsRequest req) throws (1: IdgenError err),
    ParseIDResponse ParseID(1: ParseIDRequest req) throws (1: IdgenError err),
    ClockResponse Clock(1: ClockRequest req) throws (1: IdgenError err),
    ListWorkersResponse ListWorkers(1: ListWorkersRequest req) throws (1: IdgenError err),
    Biz CreateBiz(1: CreateBizRequest req) throws (1: IdgenError err),
    Biz UpdateBiz(1: UpdateBizRequest req) throws (1: IdgenError err),
    Biz GetBiz(1: GetBizRequest req) throws (1: IdgenError err),
    ListBizResponse ListBiz(1: ListBizRequest req) throws (1: IdgenError err),
    DecodeResponse Decode(1: DecodeRequest req) throws (1: IdgenError err),
    CreateBizTokenResponse CreateBizToken(1: CreateBizTokenRequest req) throws (1: IdgenError err),
    RevokeBizTokenResponse RevokeBizToken(1: RevokeBizTokenRequest req) throws (1: IdgenError err),
    OrderedTakeResponse OrderedTake(1: OrderedTakeRequest req) throws (1: IdgenError err),
    OrderedOwnersResponse OrderedOwners(1: OrderedOwnersRequest req) throws (1: IdgenError err),
}
