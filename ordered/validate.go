package ordered

import (
	"fmt"
	"unicode/utf8"

	"github.com/idgen/idgen/segment"
)

// The input checks of every Store: each store runs them before its
// transaction, so a malformed call writes nothing and fails the same way
// on every store.

// ValidateShard refuses shard indexes outside 0..63.
func ValidateShard(shard int) error {
	if shard < 0 || shard >= segment.OrderedShards {
		return fmt.Errorf("%w: shard %d out of range 0..%d", segment.ErrInvalid, shard, segment.OrderedShards-1)
	}
	return nil
}

// ValidateKey checks a key as the ORDERED path does (business name, a
// UTF-8 sub key within segment.MaxSubKeyLen: Java's hash of invalid UTF-8
// is not reliable) and that it belongs to the shard, whose epoch guards it.
func ValidateKey(shard int, k Key) error {
	if err := segment.ValidateBizName(k.Biz); err != nil {
		return err
	}
	switch {
	case !utf8.ValidString(k.SubKey):
		return fmt.Errorf("%w: sub_key %q is not valid UTF-8 (its shard would differ from the Java service's)", segment.ErrInvalid, k.SubKey)
	case len(k.SubKey) > segment.MaxSubKeyLen:
		return fmt.Errorf("%w: sub_key is %d bytes, at most %d allowed", segment.ErrInvalid, len(k.SubKey), segment.MaxSubKeyLen)
	case segment.Shard(k.SubKey) != shard:
		return fmt.Errorf("%w: sub_key %q of %q belongs to shard %d, not %d: persist and load each shard's keys under its own epoch",
			segment.ErrInvalid, k.SubKey, k.Biz, segment.Shard(k.SubKey), shard)
	}
	return nil
}

// ValidateRequestID checks a request id to store or look up: not empty,
// and as segment.ValidateRequestID requires of it and its scope.
func ValidateRequestID(scope, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty request id (requests without an id are not stored)", segment.ErrInvalid)
	}
	return segment.ValidateRequestID(segment.RequestID{ID: id, Scope: scope})
}

// ValidatePersist checks a Persist's input before the transaction: every row
// and request of the shard and well formed, no key or request id twice
// (the later value would silently win).
func ValidatePersist(shard int, rows []Row, reqs []Request) error {
	if err := ValidateShard(shard); err != nil {
		return err
	}
	var seen map[Key]struct{}
	if len(rows) > 1 {
		seen = make(map[Key]struct{}, len(rows))
	}
	for _, r := range rows {
		if err := ValidateKey(shard, r.Key); err != nil {
			return err
		}
		if r.Num < 0 {
			return fmt.Errorf("%w: row %q/%q: negative number %d", segment.ErrInvalid, r.Biz, r.SubKey, r.Num)
		}
		if seen != nil {
			if _, dup := seen[r.Key]; dup {
				return fmt.Errorf("%w: row %q/%q appears twice in one persist: send one number per key", segment.ErrInvalid, r.Biz, r.SubKey)
			}
			seen[r.Key] = struct{}{}
		}
	}
	var seenReq map[RequestKey]struct{}
	if len(reqs) > 1 {
		seenReq = make(map[RequestKey]struct{}, len(reqs))
	}
	for _, q := range reqs {
		if err := ValidateKey(shard, Key{Biz: q.Biz, SubKey: q.SubKey}); err != nil {
			return fmt.Errorf("request %q: %w", q.ID, err)
		}
		if err := ValidateRequestID(q.Scope, q.ID); err != nil {
			return err
		}
		if q.Count < 1 || q.Count > segment.MaxStep || q.Range.First < 1 || q.Range.Last < q.Range.First || q.Range.Len() != q.Count {
			return fmt.Errorf("%w: request %q of %q: range %d..%d does not hold its count %d (count 1..%d, first >= 1)",
				segment.ErrInvalid, q.ID, q.Biz, q.Range.First, q.Range.Last, q.Count, segment.MaxStep)
		}
		if seenReq != nil {
			rk := RequestKey{Biz: q.Biz, Scope: q.Scope, ID: q.ID}
			if _, dup := seenReq[rk]; dup {
				return fmt.Errorf("%w: request id %q of %q appears twice in one persist", segment.ErrInvalid, q.ID, q.Biz)
			}
			seenReq[rk] = struct{}{}
		}
	}
	return nil
}

// ValidateShardWrites checks PersistShards' input: errs[i] is part i's
// ValidatePersist error, or segment.ErrInvalid when one of its request ids
// is in an earlier part too (the store would refuse the whole batch on
// it); err is set when a shard appears twice (the parts' epochs and rows
// of one shard would have to be merged: the caller sends one part per
// shard).
func ValidateShardWrites(parts []ShardWrite) (errs []error, err error) {
	errs = make([]error, len(parts))
	shards := make(map[int]struct{}, len(parts))
	var reqs map[RequestKey]struct{}
	for i, p := range parts {
		if _, twice := shards[p.Shard]; twice {
			return nil, fmt.Errorf("%w: shard %d appears twice in one group commit", segment.ErrInvalid, p.Shard)
		}
		shards[p.Shard] = struct{}{}
		if errs[i] = ValidatePersist(p.Shard, p.Rows, p.Reqs); errs[i] != nil {
			continue
		}
		for _, q := range p.Reqs {
			if _, twice := reqs[q.key()]; twice {
				errs[i] = fmt.Errorf("%w: request id %q of %q appears in two shards' parts of one group commit", segment.ErrInvalid, q.ID, q.Biz)
				break
			}
		}
		if errs[i] != nil {
			continue
		}
		for _, q := range p.Reqs {
			if reqs == nil {
				reqs = map[RequestKey]struct{}{}
			}
			reqs[q.key()] = struct{}{}
		}
	}
	return errs, nil
}
