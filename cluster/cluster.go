// Package cluster keeps an idgen cluster's record in ZooKeeper: the
// snowflake settings every node must share, and the lifecycle facts that
// decide how long a node that takes a worker slot must wait before it
// issues SNOWFLAKE IDs.
//
// A cluster is created once, explicitly (Init, `idctl cluster init`), as
// etcd's --initial-cluster-state new or kafka-storage format are: a node
// never creates one by itself. That is what lets a new cluster serve at
// once: a cluster created by Init has had no slot held before, so a slot
// without a high-water mark was never used. A node that finds no record
// cannot tell a new cluster from one whose ZooKeeper lost its data, so it
// refuses, unless it was a member (its properties file says so): then it
// re-creates the record from its local copy (Restore), keeping created_ms
// so the snowflake floor never moves, and marks it restored.
//
// ZooKeeper can lose acknowledged writes when its data is wiped or
// restored from an older copy. Then the slots' marks are stale while nodes
// that ran before may still issue up to their real marks. Two facts in the
// record bound that, both in ZooKeeper's clock (znode mtimes, so no node's
// clock enters them):
//
//   - RestoredMs: when a node last detected that ZooKeeper lost state (its
//     own mark went back, the record was gone or re-created, or the
//     ensemble refused its zxid).
//   - ZKEpochSeenMs: when a node first wrote in the ensemble's current
//     epoch (the high 32 bits of a zxid; it changes with every leader
//     election and with every restart of an ensemble, restored or not).
//
// A node that takes a slot in the lead after either of them waits until
// it has passed (Record.Bound): every holder from before the loss wrote
// its last mark before it, so its marks end within one lead after it.
// Running holders keep their slots through elections and pay nothing.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZK is the part of a ZooKeeper client this package uses; *zk.Conn and
// the worker package's client implement it.
type ZK interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Get(path string) ([]byte, *zk.Stat, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Exists(path string) (bool, *zk.Stat, error)
}

// ACLReader is implemented by clients that can read a znode's ACL
// (*zk.Conn does). Now uses it so that the znodes it creates under a
// cluster take the cluster's ACL whatever its caller passes.
type ACLReader interface {
	GetACL(path string) ([]zk.ACL, *zk.Stat, error)
}

var _ ACLReader = (*zk.Conn)(nil)

// Errors of the cluster package.
var (
	// ErrNotFound: ZooKeeper has no record of the cluster.
	ErrNotFound = errors.New("cluster does not exist")
	// ErrExists: Init found a record already.
	ErrExists = errors.New("cluster exists already")
	// ErrInvalid: a record or a setting is invalid; the message says which.
	ErrInvalid = errors.New("invalid cluster record")
)

// RegistryZooKeeper is the worker registry of clusters whose slots are
// held in ZooKeeper (the only kind with a record here; MySQL-held
// clusters record theirs in worker_cluster).
const RegistryZooKeeper = "zookeeper"

// Record is the JSON of /<root>/<cluster>/meta.
type Record struct {
	// The snowflake settings: identical on every node (the worker package
	// refuses a node whose configuration differs).
	EpochMs  int64 `json:"epoch_ms"`
	IDCBits  int   `json:"idc_bits"`
	NodeBits int   `json:"node_bits"`
	// CreatedMs is when the cluster was created (Unix ms): the snowflake
	// floor derives from it, so a restore keeps it.
	CreatedMs int64 `json:"created_ms"`
	// Epoch and Created repeat EpochMs and CreatedMs in RFC 3339 for people
	// reading the znode with zkCli.sh.
	Epoch   string `json:"epoch,omitempty"`
	Created string `json:"created,omitempty"`
	// Registry is where the cluster's worker slots are held.
	Registry string `json:"registry,omitempty"`
	// Init is true for a cluster created by Init (or restored): a slot
	// without a mark was never held. false: a cluster created by a node of
	// an older idgen on its first start, which cannot be told from one
	// re-created after a wipe, so its unmarked slots wait one lead after
	// the record's creation (the znode's ctime).
	Init bool `json:"init,omitempty"`
	// RestoredMs is when ZooKeeper's loss of state was last detected
	// (ZooKeeper's clock), Restores how often, RestoreReason the last
	// reason.
	RestoredMs    int64  `json:"restored_ms,omitempty"`
	Restored      string `json:"restored,omitempty"`
	Restores      int    `json:"restores,omitempty"`
	RestoreReason string `json:"restore_reason,omitempty"`
	// ZKEpoch is the ensemble epoch (zxid >> 32) last recorded, and
	// ZKEpochSeenMs when a node first wrote in it (ZooKeeper's clock; 0
	// when recorded at creation or on upgrade, when no bound applies).
	ZKEpoch       int64 `json:"zk_epoch,omitempty"`
	ZKEpochSeenMs int64 `json:"zk_epoch_seen_ms,omitempty"`
}

// Settings are the snowflake settings of a cluster.
type Settings struct {
	EpochMs  int64
	IDCBits  int
	NodeBits int
}

// Bound returns the ZooKeeper time (Unix ms) before which a node that
// takes a slot must not issue: one lead after the last detected loss of
// state or the last epoch change, 0 if neither was recorded.
func (r Record) Bound(lead time.Duration) int64 {
	base := max(r.RestoredMs, r.ZKEpochSeenMs)
	if base == 0 {
		return 0
	}
	return base + lead.Milliseconds()
}

// Path returns the cluster's znode /<root>/<name>.
func Path(root, name string) string {
	if root == "/" {
		return "/" + name
	}
	return root + "/" + name
}

// MetaPath returns the record's znode.
func MetaPath(root, name string) string { return Path(root, name) + "/meta" }

// ClockPath returns the znode touched to read ZooKeeper's time.
func ClockPath(root, name string) string { return Path(root, name) + "/clock" }

// Time is one reading of ZooKeeper's clock: the mtime of a write to the
// cluster's clock znode, with the zxid of that write and the local time
// the answer arrived.
type Time struct {
	Ms    int64     // ZooKeeper's time, Unix ms (the write's mtime)
	Zxid  int64     // the write's zxid
	Local time.Time // this host's time when the answer arrived
}

// Epoch is the ensemble epoch of the reading (zxid >> 32).
func (t Time) Epoch() int64 { return t.Zxid >> 32 }

// ToLocal converts a ZooKeeper time to this host's clock. The answer's
// arrival is at or after ZooKeeper stamped the write, so the conversion
// errs late by at most the round trip: safe for a bound a node must wait
// past.
func (t Time) ToLocal(zkMs int64) int64 {
	if zkMs == 0 {
		return 0
	}
	return zkMs + t.Local.UnixMilli() - t.Ms
}

// Now reads ZooKeeper's time by touching the cluster's clock znode
// (creating it if missing): ZooKeeper has no "what time is it" call, and
// the mtime is stamped by the same leader clock that stamps every other
// znode. The cluster's znode must exist.
//
// A missing clock znode is created with acl, except that a world acl is
// replaced by the cluster znode's ACL when c can read it (ACLReader).
// Readers such as worker.ListWorkers know no credential's ACL and pass a
// world one; the clock they created in a cluster with a digest
// credential was open to every client (readable, writable, and its ACL
// changeable: a stranger could lock the nodes out of ZooKeeper's clock).
// Clusters without a credential have a world-open cluster znode, so
// nothing changes for them.
func Now(c ZK, root, name string, acl []zk.ACL) (Time, error) {
	p := ClockPath(root, name)
	st, err := c.Set(p, nil, -1)
	if errors.Is(err, zk.ErrNoNode) {
		if r, ok := c.(ACLReader); ok && slices.Equal(acl, zk.WorldACL(zk.PermAll)) {
			if parent, _, aerr := r.GetACL(Path(root, name)); aerr == nil && len(parent) > 0 {
				acl = parent
			}
		}
		if _, err = c.Create(p, nil, 0, acl); err == nil || errors.Is(err, zk.ErrNodeExists) {
			st, err = c.Set(p, nil, -1)
		}
	}
	if err != nil {
		return Time{}, fmt.Errorf("read ZooKeeper's time (write %s): %w", p, err)
	}
	if st == nil || st.Mtime == 0 {
		return Time{}, fmt.Errorf("read ZooKeeper's time (write %s): no mtime in the answer", p)
	}
	return Time{Ms: st.Mtime, Zxid: st.Mzxid, Local: time.Now()}, nil
}

// Read returns the cluster's record and its znode's stat (ErrNotFound
// when there is none).
func Read(c ZK, root, name string) (Record, *zk.Stat, error) {
	p := MetaPath(root, name)
	b, st, err := c.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return Record{}, nil, fmt.Errorf("%w: no %s", ErrNotFound, p)
	}
	if err != nil {
		return Record{}, nil, fmt.Errorf("read %s: %w", p, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, nil, fmt.Errorf("%w: %s is not valid JSON (%q): %v", ErrInvalid, p, truncate(b), err)
	}
	return r, st, nil
}

// Init creates the cluster: its znodes (parents included, the root open,
// the cluster's subtree with acl) and its record with s, created now
// (ZooKeeper's clock) and the current ensemble epoch. ErrExists, with the
// record found, when it exists already.
func Init(c ZK, root, name string, s Settings, acl []zk.ACL) (Record, error) {
	return InitAt(c, root, name, s, 0, acl)
}

// InitAt is Init with a given creation time (createdMs > 0), for a cluster
// that existed elsewhere before (moved from MySQL-held slots): the
// snowflake floor derives from it and must not move.
func InitAt(c ZK, root, name string, s Settings, createdMs int64, acl []zk.ACL) (Record, error) {
	if err := validate(root, name, s); err != nil {
		return Record{}, err
	}
	if err := EnsurePath(c, root, zk.WorldACL(zk.PermAll)); err != nil {
		return Record{}, err
	}
	if err := EnsurePath(c, Path(root, name), acl); err != nil {
		return Record{}, err
	}
	if r, _, err := Read(c, root, name); err == nil {
		return r, fmt.Errorf("%w: %s", ErrExists, MetaPath(root, name))
	} else if !errors.Is(err, ErrNotFound) {
		return Record{}, err
	}
	now, err := Now(c, root, name, acl)
	if err != nil {
		return Record{}, err
	}
	if createdMs <= 0 {
		createdMs = now.Ms
	}
	r := Record{EpochMs: s.EpochMs, IDCBits: s.IDCBits, NodeBits: s.NodeBits, CreatedMs: createdMs,
		Registry: RegistryZooKeeper, Init: true, ZKEpoch: now.Epoch()}
	if err := create(c, MetaPath(root, name), r, acl); err != nil {
		if errors.Is(err, zk.ErrNodeExists) {
			got, _, rerr := Read(c, root, name)
			if rerr != nil {
				return Record{}, rerr
			}
			return got, fmt.Errorf("%w: %s", ErrExists, MetaPath(root, name))
		}
		return Record{}, err
	}
	return r.readable(), nil
}

// Restore re-creates a lost record from a member's local copy (same
// settings and created_ms) and marks it restored at now with reason. If
// another node re-created it meanwhile, that record is marked instead.
func Restore(c ZK, root, name string, from Record, now Time, reason string, acl []zk.ACL) (Record, error) {
	r := Record{EpochMs: from.EpochMs, IDCBits: from.IDCBits, NodeBits: from.NodeBits, CreatedMs: from.CreatedMs,
		Registry: RegistryZooKeeper, Init: true, RestoredMs: now.Ms, Restores: from.Restores + 1,
		RestoreReason: reason, ZKEpoch: now.Epoch(), ZKEpochSeenMs: now.Ms}
	if err := EnsurePath(c, Path(root, name), acl); err != nil {
		return Record{}, err
	}
	err := create(c, MetaPath(root, name), r, acl)
	if errors.Is(err, zk.ErrNodeExists) {
		return MarkRestored(c, root, name, now, reason)
	}
	if err != nil {
		return Record{}, err
	}
	return r.readable(), nil
}

// MarkRestored records that ZooKeeper lost state, detected at now: every
// slot taken in the next lead waits until it has passed (Bound). The
// update is conditional on the record's version, retried on a conflict;
// RestoredMs never goes back.
func MarkRestored(c ZK, root, name string, now Time, reason string) (Record, error) {
	return update(c, root, name, func(r *Record) bool {
		r.RestoredMs = max(r.RestoredMs, now.Ms)
		r.Restores++
		r.RestoreReason = reason
		return true
	})
}

// NoteEpoch records that this node wrote in ensemble epoch at seenMs
// (ZooKeeper's clock). An epoch already recorded (or an older one) leaves
// the record as it is. seenMs 0 records the epoch without a bound (a
// record that never had an epoch: a cluster created by an older idgen).
func NoteEpoch(c ZK, root, name string, epoch, seenMs int64) (Record, error) {
	return update(c, root, name, func(r *Record) bool {
		if r.ZKEpoch >= epoch {
			return false
		}
		r.ZKEpoch = epoch
		r.ZKEpochSeenMs = max(r.ZKEpochSeenMs, seenMs)
		return true
	})
}

// SetRegistry records where the cluster's worker slots are held
// (RegistryZooKeeper, or what `idctl cluster migrate` writes while and
// after it moves them: "migrating", "mysql"). A node takes a slot in
// ZooKeeper only while the record says RegistryZooKeeper (or nothing: a
// record from before registries), and reads it again after each claim.
func SetRegistry(c ZK, root, name, registry string) (Record, error) {
	return update(c, root, name, func(r *Record) bool {
		if r.Registry == registry {
			return false
		}
		r.Registry = registry
		return true
	})
}

// update applies f to the record with a conditional write, retrying when
// another node wrote in between; f returns false to write nothing.
func update(c ZK, root, name string, f func(*Record) bool) (Record, error) {
	p := MetaPath(root, name)
	for attempt := 0; attempt < 20; attempt++ {
		r, st, err := Read(c, root, name)
		if err != nil {
			return Record{}, err
		}
		if !f(&r) {
			return r, nil
		}
		r = r.readable()
		_, err = c.Set(p, toJSON(r), st.Version)
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil {
			return Record{}, fmt.Errorf("update %s: %w", p, err)
		}
		return r, nil
	}
	return Record{}, fmt.Errorf("update %s: it kept changing under 20 attempts", p)
}

func create(c ZK, p string, r Record, acl []zk.ACL) error {
	if _, err := c.Create(p, toJSON(r.readable()), 0, acl); err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

// readable fills the RFC 3339 copies.
func (r Record) readable() Record {
	r.Epoch, r.Created = rfc3339(r.EpochMs), rfc3339(r.CreatedMs)
	r.Restored = ""
	if r.RestoredMs != 0 {
		r.Restored = rfc3339(r.RestoredMs)
	}
	return r
}

func validate(root, name string, s Settings) error {
	switch {
	case !strings.HasPrefix(root, "/") || (len(root) > 1 && strings.HasSuffix(root, "/")) || strings.Contains(root, "//"):
		return fmt.Errorf("%w: root %q is not an absolute ZooKeeper path like /idgen", ErrInvalid, root)
	case name == "" || strings.ContainsAny(name, "/:\x00") || name == "." || name == "..":
		return fmt.Errorf("%w: cluster name %q must be a non-empty name without '/', ':' or NUL", ErrInvalid, name)
	case s.EpochMs < 0:
		return fmt.Errorf("%w: epoch_ms %d is negative", ErrInvalid, s.EpochMs)
	case s.IDCBits < 0 || s.NodeBits < 0 || s.IDCBits+s.NodeBits != 10:
		return fmt.Errorf("%w: idc_bits + node_bits is %d+%d: must be 10 (the worker field of a snowflake ID)", ErrInvalid, s.IDCBits, s.NodeBits)
	}
	return nil
}

// EnsurePath creates path and its missing parents as persistent znodes.
func EnsurePath(c ZK, path string, acl []zk.ACL) error {
	if ok, _, err := c.Exists(path); err == nil && ok {
		return nil
	}
	cur := ""
	for _, p := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		cur += "/" + p
		if _, err := c.Create(cur, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

func rfc3339(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// toJSON encodes a record, indented for zkCli.sh readers; it holds only
// strings, numbers and booleans, so encoding cannot fail.
func toJSON(v any) []byte {
	b, _ := json.MarshalIndent(v, "", "  ")
	return b
}

// ErrBadAuth: a ZooKeeper digest credential that is not "user:password".
var ErrBadAuth = errors.New(`ZooKeeper digest credential must be "user:password"`)

// ACL returns the ACL of the znodes idgen creates under a cluster: open
// without a credential, else every permission for the digest user only.
// Every package that writes under the cluster (the worker lease, the
// business store, the replication guard) uses it, so they agree.
func ACL(auth string) ([]zk.ACL, error) {
	if auth == "" {
		return zk.WorldACL(zk.PermAll), nil
	}
	user, pass, ok := strings.Cut(auth, ":")
	if !ok || user == "" || pass == "" {
		return nil, ErrBadAuth
	}
	return zk.DigestACL(zk.PermAll, user, pass), nil
}

// Errors of Call.
var (
	// ErrNoSession: the client had no ZooKeeper session for the whole
	// timeout (ZooKeeper unreachable, or the client reconnecting).
	ErrNoSession = errors.New("no ZooKeeper session")
	// ErrNoAnswer: the operation did not finish within the timeout; its
	// outcome is unknown.
	ErrNoAnswer = errors.New("ZooKeeper did not answer in time")
)

// Session is what Call needs of a client: *zk.Conn, or a test fake.
type Session interface {
	State() zk.State
}

// Call runs one ZooKeeper operation bounded by timeout. It does not queue
// behind a reconnect: without a session it waits at most the timeout for
// one (ErrNoSession), and an operation that cannot finish in time is
// abandoned (ErrNoAnswer). The coordinator of ORDERED shard owners and
// the replication guard share it.
func Call(ctx context.Context, c Session, timeout time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if c.State() != zk.StateHasSession {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for c.State() != zk.StateHasSession {
			select {
			case <-ctx.Done():
				return ErrNoSession
			case <-t.C:
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w (within %v)", ErrNoAnswer, timeout)
	}
}
