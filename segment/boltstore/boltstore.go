// Package boltstore is the embedded segment.Store of a standalone idgen
// node: one bbolt file (<data dir>/idgen.db) holding the businesses, the
// UNORDERED counters, the ORDERED counters and the ORDERED request ids.
//
// Durability: every reservation is committed with fsync before it returns,
// so a crash never re-issues numbers. ORDERED reservations go through
// bbolt's Batch, which folds concurrent requests into one fsync.
//
// Exclusivity: bbolt takes an flock on the file; a second process (or a
// second Open in the same process) fails after Options.LockTimeout with
// ErrDirInUse instead of waiting forever.
//
// Layout (all keys and values readable with `bbolt` tooling):
//
//	meta      "created_at" -> RFC 3339 UTC time of the first Open
//	          "schema"     -> "1"
//	biz       name -> JSON settings
//	segments  name -> 8-byte big-endian max_id (last reserved UNORDERED number)
//	ordered   biz 0x00 sub_key -> 8-byte big-endian last reserved number
//	requests  biz 0x00 request_id -> created(8) first(8) last(8) count(8) sub_key
//	req_time  created(8) biz 0x00 request_id -> "" (index for expiry)
//	ordered_shards  the ORDERED shard owners' epochs, created by the owners'
//	          store in this file (ordered/boltstore)
//
// A request_id key is segment.StoredRequestID: the caller's id, or for a
// request that carried a token 0x00 scope 0x00 id, so ids of different
// callers never meet (files written before scopes hold unscoped ids, read
// as they were).
package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/internal/boltfile"
	"github.com/idgen/idgen/segment"
)

// FileName is the database file inside the data dir.
const FileName = "idgen.db"

// Defaults for Options fields left zero.
const (
	DefaultLockTimeout      = time.Second
	DefaultRequestRetention = 24 * time.Hour
	DefaultCleanupInterval  = time.Minute
	DefaultCleanupBatch     = 1000
	DefaultBatchDelay       = time.Millisecond
)

// ErrDirInUse is returned by Open when another process (or another Store in
// this process) holds the data dir.
var ErrDirInUse = errors.New("data dir in use by another idgen process")

// Options configures Open. The zero value of every field is a documented
// default.
type Options struct {
	// Logger receives open/close and cleanup logs; nil means no logs.
	Logger *zap.Logger
	// LockTimeout is how long Open waits for the file lock before failing
	// with ErrDirInUse (default 1s).
	LockTimeout time.Duration
	// RequestRetention is how long ORDERED request ids are remembered
	// (default 24h); a retry later than that gets a new range.
	RequestRetention time.Duration
	// CleanupInterval is how often expired request ids are deleted
	// (default 1m).
	CleanupInterval time.Duration
	// CleanupBatch bounds the request ids deleted per cleanup pass (default
	// 1000), so one pass never holds the write lock for long.
	CleanupBatch int
	// BatchDelay is how long an ORDERED reservation waits for others to
	// share its transaction and fsync (default 1ms).
	BatchDelay time.Duration
	// Clock stamps businesses, request ids and the data dir's creation
	// time; nil means the system clock.
	Clock clock.Clock
}

// withDefaults validates o and fills its defaults; errors name the field.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.LockTimeout < 0:
		return o, fmt.Errorf("boltstore: LockTimeout %v must not be negative", o.LockTimeout)
	case o.RequestRetention < 0:
		return o, fmt.Errorf("boltstore: RequestRetention %v must not be negative", o.RequestRetention)
	case o.CleanupInterval < 0:
		return o, fmt.Errorf("boltstore: CleanupInterval %v must not be negative", o.CleanupInterval)
	case o.CleanupBatch < 0:
		return o, fmt.Errorf("boltstore: CleanupBatch %d must not be negative", o.CleanupBatch)
	case o.BatchDelay < 0:
		return o, fmt.Errorf("boltstore: BatchDelay %v must not be negative", o.BatchDelay)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.RequestRetention == 0 {
		o.RequestRetention = DefaultRequestRetention
	}
	if o.CleanupInterval == 0 {
		o.CleanupInterval = DefaultCleanupInterval
	}
	if o.CleanupBatch == 0 {
		o.CleanupBatch = DefaultCleanupBatch
	}
	if o.BatchDelay == 0 {
		o.BatchDelay = DefaultBatchDelay
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	return o, nil
}

var (
	bucketMeta     = []byte("meta")
	bucketBiz      = []byte("biz")
	bucketSegments = []byte("segments")
	// ordered, requests and req_time: boltfile.Bucket*, shared with
	// ordered/boltstore.

	keyCreatedAt = []byte("created_at")
	keySchema    = []byte("schema")
)

// Store is the bbolt-backed segment.Store. It is safe for concurrent use.
type Store struct {
	db        *bolt.DB
	file      *boltfile.File // db with the clock and retention, shared with ordered/boltstore
	path      string
	opts      Options
	log       *zap.Logger
	createdAt time.Time

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var (
	_ segment.Store          = (*Store)(nil)
	_ segment.ReplayReporter = (*Store)(nil)
)

// Open opens (creating if needed) the store in dir. It fails with an error
// wrapping ErrDirInUse when another process holds the directory.
func Open(dir string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// 0700 like every data directory idgen creates: the store holds
	// the counters (and the business keys unless a master key wraps them).
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("boltstore: create data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("boltstore: open %s: %w (file lock not acquired within %v)", path, ErrDirInUse, opts.LockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	db.MaxBatchDelay = opts.BatchDelay

	s := &Store{db: db, path: path, opts: opts, log: opts.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	s.file = &boltfile.File{DB: db, Clock: opts.Clock, RequestRetention: opts.RequestRetention}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: init %s: %w", path, err)
	}
	s.log.Info("segment store opened", zap.String("path", path), zap.Time("created_at", s.createdAt))
	go s.cleanupLoop()
	return s, nil
}

// init creates the buckets and records the creation time on first open.
func (s *Store) init() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketBiz, bucketSegments, boltfile.BucketOrdered, boltfile.BucketRequests, boltfile.BucketReqTime} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyCreatedAt); v != nil {
			t, err := time.Parse(time.RFC3339Nano, string(v))
			if err != nil {
				return fmt.Errorf("meta created_at %q: %w", v, err)
			}
			s.createdAt = t.UTC()
			return nil
		}
		s.createdAt = s.opts.Clock.Now().UTC()
		if err := meta.Put(keyCreatedAt, []byte(s.createdAt.Format(time.RFC3339Nano))); err != nil {
			return err
		}
		return meta.Put(keySchema, []byte("1"))
	})
}

// CreatedAt returns when the data dir was first opened (UTC). The
// standalone snowflake floor is derived from it, so it never changes.
func (s *Store) CreatedAt() time.Time { return s.createdAt }

// File returns the store's open file with its clock and request
// retention: the ORDERED owners' store of a standalone node
// (ordered/boltstore.New) runs on it, since bbolt allows one handle per
// file. Its type is internal to the module.
func (s *Store) File() *boltfile.File { return s.file }

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close stops the cleanup and closes the file, releasing the lock.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.closeErr = s.db.Close()
		s.log.Info("segment store closed", zap.String("path", s.path))
	})
	return s.closeErr
}
