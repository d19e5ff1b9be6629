// Package boltfile is what the two bbolt stores of a standalone idgen node
// share: the segment store (segment/boltstore: businesses, UNORDERED
// segments, the per-request ORDERED path) and the ORDERED owners'
// epoch-fenced store (ordered/boltstore). Both live in one bbolt file
// through one handle (File), on the same ORDERED counters and request
// records, so each path continues above the other's numbers and replays
// the other's request ids. The bucket names, the key encoding and the
// request record format are defined here once.
//
// It is internal: the public API of either store does not grow by it.
package boltfile

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/segment"
)

// Buckets both stores use (the layout is in segment/boltstore's package
// doc).
var (
	// BucketOrdered: biz 0x00 sub_key -> 8-byte big-endian last reserved number.
	BucketOrdered = []byte("ordered")
	// BucketRequests: biz 0x00 request_id -> a Request record.
	BucketRequests = []byte("requests")
	// BucketReqTime: created(8) biz 0x00 request_id -> "" (index for expiry).
	BucketReqTime = []byte("req_time")
)

// File is the open bbolt file of a node with the settings both stores
// read. segment/boltstore opens it; ordered/boltstore uses the same one
// (segment/boltstore's Store.File): bbolt allows one handle per file.
type File struct {
	DB *bolt.DB
	// Clock stamps request ids (never nil).
	Clock clock.Clock
	// RequestRetention is how long request ids are remembered; an older
	// one counts as gone.
	RequestRetention time.Duration
}

// Batch runs fn in a bbolt Batch transaction but returns when ctx ends,
// because bbolt itself ignores contexts: a caller is never held past its
// deadline by a slow disk. A transaction abandoned this way may still
// commit; that leaves a gap (or, with a request id, an answer for the
// retry), never a duplicate. fn may run more than once and must set its
// results from scratch each time.
func (f *File) Batch(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- f.DB.Batch(fn) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ExpiredBefore is the creation time (Unix ns) below which a request id
// stored by now counts as gone.
func (f *File) ExpiredBefore(now int64) int64 { return now - int64(f.RequestRetention) }

// U64 encodes v as 8 bytes big-endian.
func U64(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

// I64 decodes U64.
func I64(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }

// JoinKey builds biz 0x00 rest; biz names cannot contain 0x00, so the
// split is unambiguous whatever rest holds.
func JoinKey(biz, rest string) []byte {
	k := make([]byte, 0, len(biz)+1+len(rest))
	k = append(k, biz...)
	k = append(k, 0)
	return append(k, rest...)
}

// Request is a stored ORDERED request id: created(8) first(8) last(8)
// count(8) sub_key.
type Request struct {
	Created int64 // Unix ns
	Range   segment.Range
	Count   int64
	SubKey  string
}

// EncodeRequest is the stored form of q.
func EncodeRequest(q Request) []byte {
	b := make([]byte, 0, 32+len(q.SubKey))
	b = append(b, U64(q.Created)...)
	b = append(b, U64(q.Range.First)...)
	b = append(b, U64(q.Range.Last)...)
	b = append(b, U64(q.Count)...)
	return append(b, q.SubKey...)
}

// DecodeRequest reads EncodeRequest's form.
func DecodeRequest(v []byte) (Request, error) {
	if len(v) < 32 {
		return Request{}, fmt.Errorf("boltstore: request record of %d bytes", len(v))
	}
	return Request{
		Created: I64(v[0:8]),
		Range:   segment.Range{First: I64(v[8:16]), Last: I64(v[16:24])},
		Count:   I64(v[24:32]),
		SubKey:  string(v[32:]),
	}, nil
}

// PutRequest stores q under rk (a JoinKey of biz and the stored request
// id) with its expiry index entry.
func PutRequest(reqs, byTime *bolt.Bucket, rk []byte, q Request) error {
	if err := reqs.Put(rk, EncodeRequest(q)); err != nil {
		return err
	}
	return byTime.Put(append(U64(q.Created), rk...), nil)
}

// DeleteRequest deletes the request record rk created at created, with its
// expiry index entry.
func DeleteRequest(reqs, byTime *bolt.Bucket, rk []byte, created int64) error {
	if err := reqs.Delete(rk); err != nil {
		return err
	}
	return byTime.Delete(append(U64(created), rk...))
}
