package segment

import (
	"crypto/sha256"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits shared by every Store and processor, so that a business or request
// accepted by one store is accepted by all of them (the MySQL columns are
// sized from these).
const (
	// MaxBizNameLen is the longest business name.
	MaxBizNameLen = 128
	// MaxSubKeyLen is the longest ORDERED sub key, in bytes.
	MaxSubKeyLen = 128
	// MaxRequestIDLen is the longest request id, in bytes.
	MaxRequestIDLen = 128
	// MaxRequestScopeLen is the longest request scope (RequestID.Scope),
	// in bytes; a stored request id (StoredRequestID) is at most
	// MaxStoredRequestIDLen.
	MaxRequestScopeLen    = 32
	MaxStoredRequestIDLen = MaxRequestIDLen + MaxRequestScopeLen + 2
	// MaxDescriptionLen is the longest business description, in bytes.
	MaxDescriptionLen = 1024
	// MaxLowWaterPct is the highest low-water mark: refilling later than at
	// 90 % left would make the double buffer pointless.
	MaxLowWaterPct = 90
	// MaxBatch is the largest number of IDs one request may take.
	MaxBatch = 10000
	// MaxBizTokens is how many client tokens one business may hold at once.
	MaxBizTokens = 8
	// MaxTokenIDLen and MaxTokenLabelLen bound a token's ID and label.
	MaxTokenIDLen    = 32
	MaxTokenLabelLen = 128
)

// ValidateBizName reports whether name is a valid business name:
// ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$. It is hand-written rather than a
// regexp so the package has no global state and the hot path stays cheap.
func ValidateBizName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: biz name is empty", ErrInvalid)
	}
	if len(name) > MaxBizNameLen {
		return fmt.Errorf("%w: biz name is %d bytes, at most %d allowed", ErrInvalid, len(name), MaxBizNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || i > 0 && (c == '_' || c == '.' || c == ':' || c == '-') {
			continue
		}
		// Name the whole character, not its first byte: a UTF-8 name is
		// reported as 'é', never as 'Ã'. i is a byte offset.
		r, _ := utf8.DecodeRuneInString(name[i:])
		return fmt.Errorf("%w: biz name %q: character %q at byte %d not allowed (want [A-Za-z0-9][A-Za-z0-9_.:-]*, ASCII only)",
			ErrInvalid, name, r, i)
	}
	return nil
}

// ValidateStep reports whether step is a valid segment size (1..MaxStep).
func ValidateStep(step int64) error {
	if step < 1 || step > MaxStep {
		return fmt.Errorf("%w: step %d out of range 1..%d", ErrInvalid, step, MaxStep)
	}
	return nil
}

// NormalizeBiz fills the documented defaults into zero fields of b (Step,
// LowWaterPct, StartNum) and validates every field. Stores call it in
// CreateBiz so all of them accept and reject the same businesses; the error
// wraps ErrInvalid and names the field. Timestamps are left as they are
// (tokens' CreatedAt converted to UTC). The result shares no slice with b.
func NormalizeBiz(b Biz) (Biz, error) {
	if err := ValidateBizName(b.Name); err != nil {
		return Biz{}, err
	}
	if b.Step == 0 {
		b.Step = DefaultStep
	}
	if b.LowWaterPct == 0 {
		b.LowWaterPct = DefaultLowWaterPct
	}
	if b.StartNum == 0 {
		b.StartNum = DefaultStartNum
	}
	if b.StartNum < 1 {
		return Biz{}, fmt.Errorf("%w: biz %q: start_num %d must be >= 1", ErrInvalid, b.Name, b.StartNum)
	}
	if len(b.Key) == 0 {
		b.Key = NewSecretKey()
	} else {
		b.Key = slices.Clone(b.Key)
	}
	b.Plugins = append([]string(nil), b.Plugins...)
	b.Channels = normalizeChannels(b.Channels, b.Channel)
	// The stored business must not share memory with the caller's: a
	// caller reusing its slices would otherwise change a store's state
	// (memstore keeps the value itself) behind its lock.
	b.Tokens = cloneTokens(b.Tokens)
	for i := range b.Tokens {
		b.Tokens[i].CreatedAt = b.Tokens[i].CreatedAt.UTC()
	}
	return b, validateSettings(b)
}

// validateSettings checks the fields that BizUpdate can change.
func validateSettings(b Biz) error {
	switch {
	case b.Channel < ChannelUnordered || b.Channel > ChannelSnowflake:
		return fmt.Errorf("%w: biz %q: channel %d out of range 0..2", ErrInvalid, b.Name, b.Channel)
	case b.Step < 1 || b.Step > MaxStep:
		return fmt.Errorf("%w: biz %q: step %d out of range 1..%d", ErrInvalid, b.Name, b.Step, MaxStep)
	case b.LowWaterPct < 1 || b.LowWaterPct > MaxLowWaterPct:
		return fmt.Errorf("%w: biz %q: low_water_pct %d out of range 1..%d", ErrInvalid, b.Name, b.LowWaterPct, MaxLowWaterPct)
	case b.RateLimit < 0:
		return fmt.Errorf("%w: biz %q: rate_limit %d must be >= 0", ErrInvalid, b.Name, b.RateLimit)
	case b.IDQuota < 0:
		return fmt.Errorf("%w: biz %q: id_quota %d must be >= 0 (0 = unlimited)", ErrInvalid, b.Name, b.IDQuota)
	case b.IDBurst < 0:
		return fmt.Errorf("%w: biz %q: id_burst %d must be >= 0 (0 = as many as id_quota)", ErrInvalid, b.Name, b.IDBurst)
	case len(b.Description) > MaxDescriptionLen:
		return fmt.Errorf("%w: biz %q: description is %d bytes, at most %d allowed", ErrInvalid, b.Name, len(b.Description), MaxDescriptionLen)
	case !b.OrderedMode.Valid():
		return fmt.Errorf("%w: biz %q: ordered_mode %d unknown: want gapless (%d) or cached (%d)",
			ErrInvalid, b.Name, b.OrderedMode, OrderedGapless, OrderedCached)
	}
	if err := validateTokens(b); err != nil {
		return err
	}
	if err := validateOutput(b); err != nil {
		return err
	}
	return validateChannels(b)
}

// validateTokens checks every token of b and that their IDs are unique and
// at most MaxBizTokens: a token ID names the token to revoke, so two with
// one ID could not be told apart.
func validateTokens(b Biz) error {
	if len(b.Tokens) > MaxBizTokens {
		return fmt.Errorf("%w: biz %q: %d tokens, at most %d allowed", ErrInvalid, b.Name, len(b.Tokens), MaxBizTokens)
	}
	for i, t := range b.Tokens {
		if err := validateToken(b.Name, t); err != nil {
			return err
		}
		for _, prev := range b.Tokens[:i] {
			if prev.ID == t.ID {
				return fmt.Errorf("%w: biz %q: token id %q listed twice: token ids must be unique", ErrInvalid, b.Name, t.ID)
			}
		}
	}
	return nil
}

// validateToken checks one token's fields. The ID and label end up in
// idctl output and logs, hence the narrow alphabet of the ID and no
// control characters in the label (they could forge log lines or
// terminal escapes).
func validateToken(biz string, t BizToken) error {
	if t.ID == "" || len(t.ID) > MaxTokenIDLen {
		return fmt.Errorf("%w: biz %q: token id %q: want 1..%d characters", ErrInvalid, biz, t.ID, MaxTokenIDLen)
	}
	for i := 0; i < len(t.ID); i++ {
		c := t.ID[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			r, _ := utf8.DecodeRuneInString(t.ID[i:])
			return fmt.Errorf("%w: biz %q: token id %q: character %q at byte %d not allowed (want [A-Za-z0-9_-])", ErrInvalid, biz, t.ID, r, i)
		}
	}
	switch {
	case len(t.Label) > MaxTokenLabelLen:
		return fmt.Errorf("%w: biz %q: token %q: label is %d bytes, at most %d allowed", ErrInvalid, biz, t.ID, len(t.Label), MaxTokenLabelLen)
	case !utf8.ValidString(t.Label):
		return fmt.Errorf("%w: biz %q: token %q: label is not valid UTF-8", ErrInvalid, biz, t.ID)
	case strings.ContainsFunc(t.Label, unicode.IsControl):
		return fmt.Errorf("%w: biz %q: token %q: label %q contains a control character", ErrInvalid, biz, t.ID, t.Label)
	case len(t.Hash) != sha256.Size:
		return fmt.Errorf("%w: biz %q: token %q: hash is %d bytes, want %d (the SHA-256 of the secret, never the secret itself)", ErrInvalid, biz, t.ID, len(t.Hash), sha256.Size)
	}
	return nil
}

// cloneTokens returns a copy of ts sharing no memory with it (nil for
// none, so an empty list stores and compares as no tokens).
func cloneTokens(ts []BizToken) []BizToken {
	if len(ts) == 0 {
		return nil
	}
	out := make([]BizToken, len(ts))
	for i, t := range ts {
		t.Hash = slices.Clone(t.Hash)
		out[i] = t
	}
	return out
}

// applyTokenUpdate applies u's RevokeToken, then its AddToken, so that
// one update can rotate a token of a business that holds MaxBizTokens.
// It runs inside the store's read-modify-write, on the stored list: two
// concurrent additions both land, and an ID conflict is decided against
// the list as stored, not as some caller last read it.
func applyTokenUpdate(b Biz, u BizUpdate, now time.Time) (Biz, error) {
	b.Tokens = cloneTokens(b.Tokens)
	if u.RevokeToken != nil {
		id := *u.RevokeToken
		i := slices.IndexFunc(b.Tokens, func(t BizToken) bool { return t.ID == id })
		if i < 0 {
			ids := make([]string, len(b.Tokens))
			for j, t := range b.Tokens {
				ids[j] = t.ID
			}
			have := "it has no tokens"
			if len(ids) > 0 {
				have = "its tokens are " + strings.Join(ids, ", ")
			}
			return Biz{}, fmt.Errorf("%w: biz %q has no token %q to revoke (%s)", ErrInvalid, b.Name, id, have)
		}
		b.Tokens = slices.Delete(b.Tokens, i, i+1)
	}
	if u.AddToken != nil {
		t := *u.AddToken
		t.Hash = slices.Clone(t.Hash)
		if t.CreatedAt.IsZero() {
			t.CreatedAt = now
		}
		t.CreatedAt = t.CreatedAt.UTC()
		if err := validateToken(b.Name, t); err != nil {
			return Biz{}, err
		}
		if slices.ContainsFunc(b.Tokens, func(o BizToken) bool { return o.ID == t.ID }) {
			return Biz{}, fmt.Errorf("%w: biz %q has a token %q already: pick another token id, or revoke that one first", ErrInvalid, b.Name, t.ID)
		}
		if len(b.Tokens) >= MaxBizTokens {
			return Biz{}, fmt.Errorf("%w: biz %q holds %d tokens, the most allowed: revoke one first", ErrInvalid, b.Name, len(b.Tokens))
		}
		b.Tokens = append(b.Tokens, t)
	}
	if len(b.Tokens) == 0 {
		b.Tokens = nil
	}
	return b, nil
}

// ApplyBizUpdate returns b with u applied and validated, UpdatedAt set to
// now (UTC). Unlike creation, an explicit zero is not replaced by a default:
// setting step 0 is an error, not a reset. A token added without CreatedAt
// is stamped now.
func ApplyBizUpdate(b Biz, u BizUpdate, now time.Time) (Biz, error) {
	// The result shares no memory with b or u: b is often a store's own
	// copy and the result is handed to callers.
	b.Plugins, b.Key = slices.Clone(b.Plugins), slices.Clone(b.Key)
	old := b
	b.Channels = StoredChannels(b.Channels, b)
	b = applyChannelUpdate(b, u)
	if u.Step != nil {
		b.Step = *u.Step
	}
	if u.LowWaterPct != nil {
		b.LowWaterPct = *u.LowWaterPct
	}
	if u.Fallback != nil {
		b.Fallback = *u.Fallback
	}
	if u.RateLimit != nil {
		b.RateLimit = *u.RateLimit
	}
	if u.Description != nil {
		b.Description = *u.Description
	}
	if u.IDQuota != nil {
		b.IDQuota = *u.IDQuota
	}
	if u.IDBurst != nil {
		b.IDBurst = *u.IDBurst
	}
	// Not an output setting: it may change after the business has issued
	// (it changes what a crash of a shard's owner costs, never order or
	// uniqueness), so it is not checked against Issued.
	if u.OrderedMode != nil {
		b.OrderedMode = *u.OrderedMode
	}
	b, err := applyTokenUpdate(b, u, now)
	if err != nil {
		return Biz{}, err
	}
	if b, err = applyOutputUpdate(b, u); err != nil {
		return Biz{}, err
	}
	if err := validateSettings(b); err != nil {
		return Biz{}, err
	}
	if err := channelsLocked(old, b); err != nil {
		return Biz{}, err
	}
	b.UpdatedAt = now.UTC()
	return b, nil
}

// NormalizeOrderedRequest validates req for a Store: biz name, count
// 1..MaxStep (processors limit requests further to MaxBatch), sub key and
// request id lengths, and StartNum (0 means DefaultStartNum).
func NormalizeOrderedRequest(req OrderedRequest) (OrderedRequest, error) {
	if err := ValidateBizName(req.Biz); err != nil {
		return req, err
	}
	if req.Count < 1 || req.Count > MaxStep {
		return req, fmt.Errorf("%w: count %d out of range 1..%d", ErrInvalid, req.Count, MaxStep)
	}
	if len(req.SubKey) > MaxSubKeyLen {
		return req, fmt.Errorf("%w: sub_key is %d bytes, at most %d allowed", ErrInvalid, len(req.SubKey), MaxSubKeyLen)
	}
	if err := ValidateRequestID(RequestID{ID: req.RequestID, Scope: req.RequestScope}); err != nil {
		return req, err
	}
	if req.StartNum == 0 {
		req.StartNum = DefaultStartNum
	}
	if req.StartNum < 1 {
		return req, fmt.Errorf("%w: start_num %d must be >= 1", ErrInvalid, req.StartNum)
	}
	// A key's first reservation ends at StartNum-1+Count; computed past
	// 2^63-1 it would wrap negative (and a store would then refuse the key
	// forever with a confusing error). Such a key has no room: say so.
	if req.StartNum-1 > math.MaxInt64-req.Count {
		return req, fmt.Errorf("%w: start_num %d plus count %d passes 2^63-1: this business has no room for the request; lower start_num", ErrExhausted, req.StartNum, req.Count)
	}
	return req, nil
}

// ValidateRequestID checks a request id (empty: none) and its scope: the
// id at most MaxRequestIDLen bytes, not beginning with NUL (which starts
// the stored form of scoped ids, StoredRequestID), and the scope at most
// MaxRequestScopeLen bytes of [A-Za-z0-9:_-].
func ValidateRequestID(rid RequestID) error {
	switch {
	case len(rid.ID) > MaxRequestIDLen:
		return fmt.Errorf("%w: request_id is %d bytes, at most %d allowed", ErrInvalid, len(rid.ID), MaxRequestIDLen)
	case strings.HasPrefix(rid.ID, "\x00"):
		return fmt.Errorf("%w: request_id begins with a NUL byte: use printable characters (a UUID, for example)", ErrInvalid)
	case len(rid.Scope) > MaxRequestScopeLen:
		return fmt.Errorf("%w: request scope is %d bytes, at most %d allowed", ErrInvalid, len(rid.Scope), MaxRequestScopeLen)
	}
	for i := 0; i < len(rid.Scope); i++ {
		c := rid.Scope[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == ':' || c == '_' || c == '-') {
			return fmt.Errorf("%w: request scope %q: byte %#x at %d not allowed (want [A-Za-z0-9:_-])", ErrInvalid, rid.Scope, c, i)
		}
	}
	return nil
}
