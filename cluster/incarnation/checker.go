package incarnation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
)

// Reader is the read call of a ZooKeeper client.
type Reader interface {
	Get(path string) ([]byte, *zk.Stat, error)
}

// ZK is the part of a ZooKeeper client the check uses: *zk.Conn and the
// shared session's handle (cluster/zksession) implement it.
type ZK interface {
	Reader
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Exists(path string) (bool, *zk.Stat, error)
}

// Syncer is implemented by clients that can make the server they talk to
// catch up with the leader (*zk.Conn). The check calls it first when it
// can; without it, its first write (the counter bump) does the same for
// every read after it in the session.
type Syncer interface {
	Sync(path string) (string, error)
}

var (
	_ ZK     = (*zk.Conn)(nil)
	_ Syncer = (*zk.Conn)(nil)
)

// Errors of the check. ErrRecreated and ErrNoCluster are permanent: the
// check wraps them with Config.Refused too (zksession.ErrRefused in a
// server), and the node must not serve until an operator acts.
var (
	// ErrRecreated: ZooKeeper (or the witness) holds another incarnation
	// than this node recorded: the cluster was re-created.
	ErrRecreated = errors.New("incarnation: the cluster was re-created")
	// ErrNoCluster: ZooKeeper has no trace of the cluster and nothing
	// says it existed: it was never created.
	ErrNoCluster = errors.New("incarnation: no such cluster")
	// ErrInvalid: a znode or record is unreadable; the message says which.
	ErrInvalid = errors.New("incarnation: invalid")
)

// WitnessState is what the witness outside ZooKeeper recorded.
type WitnessState struct {
	// Bound is false when the witness has no record for this cluster yet
	// (the database is not bound to it): nothing to compare.
	Bound bool
	// ID is the incarnation the witness recorded ("" when none yet).
	ID string
	// Counter is the highest marker counter ZooKeeper was seen to reach.
	Counter int64
}

// Witness keeps, outside ZooKeeper, the highest marker counter ZooKeeper
// reached: a node with no local record (a new node that starts first
// after a restore) learns from it that ZooKeeper went back. In a server
// it is the database's cluster_binding row.
type Witness interface {
	Load(ctx context.Context) (WitnessState, error)
	// Raise records id (when none is recorded) and raises the counter to
	// at least counter (never lowers it).
	Raise(ctx context.Context, id string, counter int64) error
}

// Config configures a Checker. Root, Cluster, NodeKey and Record are
// required.
type Config struct {
	Root    string // ZooKeeper root, e.g. /idgen
	Cluster string
	// NodeKey names this node's lineage znode when its record has none
	// yet (e.g. "idgen:8888:10.0.0.5"); a random suffix is added, and the
	// chosen name is recorded and kept.
	NodeKey string
	Record  Record
	// Witness is optional (nil: none). Without it a new node that starts
	// first after a restore does not detect it; the nodes that ran before
	// do, at their next (re)connect.
	Witness Witness
	// ACL of the znodes the check creates (nil: open to all).
	ACL []zk.ACL
	// NoMarkMeta: do not mark the cluster's meta restored on a detected
	// loss (cluster.MarkRestored). By default the check marks it before it
	// returns, so every slot taken in the next lead by any node waits, even
	// one taken right after this check.
	NoMarkMeta bool
	// Refused is wrapped into the permanent errors (ErrRecreated,
	// ErrNoCluster) besides them: zksession.ErrRefused in a server.
	Refused error
	Logger  *zap.Logger
	Now     func() time.Time // nil: time.Now
}

// Checker runs the incarnation check. Its methods are safe for
// concurrent use; checks run one at a time.
type Checker struct {
	cfg Config
	log *zap.Logger
	mu  sync.Mutex
	// passed: a check passed in this process. Before that the process
	// holds nothing in memory from before a loss another node recorded.
	passed bool
}

// NewChecker returns a Checker. A Config without Root, Cluster, NodeKey
// or Record gives a Checker whose Check fails naming the field.
func NewChecker(cfg Config) *Checker {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ACL == nil {
		cfg.ACL = zk.WorldACL(zk.PermAll)
	}
	return &Checker{cfg: cfg, log: cfg.Logger.With(zap.String("cluster", cfg.Cluster))}
}

func (c *Checker) validate() error {
	switch {
	case c.cfg.Root == "" || c.cfg.Cluster == "":
		return fmt.Errorf("%w: Config.Root and Config.Cluster are required", ErrInvalid)
	case c.cfg.NodeKey == "":
		return fmt.Errorf("%w: Config.NodeKey is required", ErrInvalid)
	case c.cfg.Record == nil:
		return fmt.Errorf("%w: Config.Record is required", ErrInvalid)
	}
	return nil
}

// Check is the incarnation check, run at every connect and reconnect of
// the node's ZooKeeper session before any other write (the session's
// Config.Check). restored: ZooKeeper lost state (wiped or restored from
// an older copy), why says how it was seen; the restore rule applies. err:
// cannot tell yet (retry), or a permanent refusal (ErrRecreated,
// ErrNoCluster, wrapped with Config.Refused).
func (c *Checker) Check(ctx context.Context, conn ZK) (restored bool, why string, err error) {
	if faultNoCheck() {
		c.log.Error("IDGEN_FAULT_NO_INCARNATION_CHECK=1: the cluster incarnation is not checked (fault injection's negative control)")
		return false, "", nil
	}
	if err := c.validate(); err != nil {
		return false, "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	reasons, err := c.check(ctx, conn)
	if err != nil {
		return false, "", err
	}
	if len(reasons) == 0 {
		return false, "", nil
	}
	return true, strings.Join(reasons, "; "), nil
}

// Touch bumps the marker's counter and raises the witness between
// (re)connects. A restore from a copy taken after a node's last
// (re)connect loses what it wrote since in the same session, while the
// lineages and counters in the copy are current; a guard that calls Touch
// after such a write (a slot claim, a mark written ahead) puts it on the
// witness's record, so a node that checks after the restore sees it, and
// records the bump, so this node sees it at its next reconnect. lost is
// true when the bump shows that ZooKeeper lost state (recorded in the
// marker and the meta as Check records it), or that another node recorded
// a loss this process has not been told of; the caller must then make
// every guard of the node apply the restore rule at once
// (zksession.Session.NoteRestore, as server/incarnation.go does): the
// record counts the loss as seen, and neither the next touch nor the next
// check reports it again.
// A node that has not passed a Check yet has nothing to touch: nil.
func (c *Checker) Touch(ctx context.Context, conn ZK) (lost bool, why string, err error) {
	if faultNoCheck() {
		return false, "", nil
	}
	if err := c.validate(); err != nil {
		return false, "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	local, err := c.cfg.Record.Load()
	if err != nil || local.ID == "" {
		return false, "", err
	}
	var w WitnessState
	if c.cfg.Witness != nil {
		if w, err = c.cfg.Witness.Load(ctx); err != nil {
			c.log.Debug("the incarnation witness (the database) cannot be read: touching ZooKeeper alone", zap.Error(err))
			w = WitnessState{}
		}
	}
	m, seen, reasons, learned, err := c.bump(conn, local, w)
	if err != nil {
		return false, "", err
	}
	if len(reasons) > 0 {
		if m, err = c.noteLoss(conn, local, w, seen, strings.Join(reasons, "; ")); err != nil {
			return false, "", err
		}
	}
	// A loss this touch saw, or another node recorded since this process
	// last looked, is reported by the caller to every guard of this node at
	// once (zksession.Session.NoteRestore): a session that survives the
	// restore never reconnects, so no check would report it. The record
	// counts it as seen: neither the next touch nor the next check reports
	// it again. (As in Check, a learned loss is reported only to a process
	// that passed a check: a process that starts holds nothing from before.)
	report := reasons
	if learned != "" && c.passed {
		report = append(report, learned)
	}
	local.Counter = m.Counter
	if len(report) > 0 {
		local.Restores = m.Restores
	}
	if err := c.cfg.Record.Save(local); err != nil {
		return false, "", fmt.Errorf("incarnation: record the counter: %w", err)
	}
	if c.cfg.Witness != nil {
		if err := c.cfg.Witness.Raise(ctx, m.ID, m.Counter); err != nil {
			c.log.Warn("raising the incarnation witness (the database) failed; retried at the next touch", zap.Int64("counter", m.Counter), zap.Error(err))
		}
	}
	if len(report) == 0 {
		return false, "", nil
	}
	return true, strings.Join(report, "; "), nil
}

// check does the work of Check and returns the reasons a loss was seen.
func (c *Checker) check(ctx context.Context, conn ZK) ([]string, error) {
	root, name := c.cfg.Root, c.cfg.Cluster
	local, err := c.cfg.Record.Load()
	if err != nil {
		return nil, fmt.Errorf("incarnation: read this node's record: %w (fix or remove the incarnation.* keys of the properties file)", err)
	}
	known := local.ID != ""
	var reasons []string // this check's own evidence of a loss

	// The witness is read before the counter bump, so every counter it
	// holds was written to ZooKeeper before the bump: in a ZooKeeper that
	// lost nothing, the bump lands above it.
	var w WitnessState
	if c.cfg.Witness != nil {
		if w, err = c.cfg.Witness.Load(ctx); err != nil {
			if !known {
				return nil, fmt.Errorf("incarnation: this node has no record of the cluster and the witness (the database) cannot be read, so a restored ZooKeeper could not be told from a healthy one; retrying: %w", err)
			}
			c.log.Warn("the incarnation witness (the database) cannot be read: checking with this node's record alone", zap.Error(err))
			w = WitnessState{}
		}
	}
	if s, ok := conn.(Syncer); ok {
		if _, err := s.Sync(cluster.Path(root, name)); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("incarnation: sync with the ZooKeeper leader: %w", err)
		}
	}

	if _, _, err := ReadMarker(conn, root, name); errors.Is(err, zk.ErrNoNode) {
		r, err := c.noMarker(conn, local, w)
		if err != nil {
			return nil, err
		}
		reasons = append(reasons, r...)
	} else if err != nil {
		return nil, fmt.Errorf("incarnation: %w", err)
	}

	m, seen, bumpReasons, learned, err := c.bump(conn, local, w)
	if err != nil {
		return nil, err
	}
	reasons = append(reasons, bumpReasons...)

	lin, lst, err := c.readLineage(conn, local)
	if err != nil {
		return nil, err
	}
	if r := judgeLineage(local, lin, lst != nil); r != "" {
		reasons = append(reasons, r)
	} else if lst != nil && local.Version != 0 && lin.Version > max(local.Version, local.PendingVersion) {
		c.log.Warn("this node's lineage in ZooKeeper is ahead of its record: its properties file was restored from a backup or is shared by another process; not a loss of ZooKeeper state",
			zap.Int64("zk_version", lin.Version), zap.Int64("recorded_version", local.Version))
	}

	if len(reasons) > 0 {
		if m, err = c.noteLoss(conn, local, w, seen, strings.Join(reasons, "; ")); err != nil {
			return nil, err
		}
	}
	switch {
	case learned == "":
	case c.passed:
		// Reported, not recorded again: the node that saw it counted it.
		reasons = append(reasons, learned)
	default:
		// A process that starts holds nothing in memory from before the
		// loss (its persisted marks are waited past by the worker's own
		// rules), and the node that saw it marked the cluster: reporting
		// it would only make every slot taken in the next lead wait again.
		c.log.Info("another node detected that ZooKeeper lost state while this node was not running", zap.String("detail", learned))
	}

	// Two-phase lineage write: record the pending lineage, write the
	// znode, confirm it. A crash between leaves ZooKeeper at the
	// confirmed or the pending lineage, both of which the next check
	// accepts.
	if local.Node == "" {
		local.Node = nodeName(c.cfg.NodeKey)
	}
	local.ID, local.CreatedMs, local.Counter, local.Restores = m.ID, m.CreatedMs, m.Counter, m.Restores
	local.PendingVersion = max(lin.Version, local.Version, local.PendingVersion) + 1
	local.PendingToken = newToken()
	if err := c.cfg.Record.Save(local); err != nil {
		return nil, fmt.Errorf("incarnation: record the pending lineage: %w", err)
	}
	if err := c.writeLineage(conn, local, lst); err != nil {
		return nil, err
	}
	local.Version, local.Token = local.PendingVersion, local.PendingToken
	local.PendingVersion, local.PendingToken = 0, ""
	if err := c.cfg.Record.Save(local); err != nil {
		return nil, fmt.Errorf("incarnation: record the lineage: %w", err)
	}

	if c.cfg.Witness != nil {
		if err := c.cfg.Witness.Raise(ctx, m.ID, m.Counter); err != nil {
			// Not a refusal: the witness lags, so a later restore may go
			// unseen by a new node (the old ones still see it).
			c.log.Warn("raising the incarnation witness (the database) failed; retried at the next (re)connect", zap.Int64("counter", m.Counter), zap.Error(err))
		}
	}
	c.passed = true
	c.log.Debug("cluster incarnation checked", zap.String("incarnation", m.ID), zap.Int64("counter", m.Counter),
		zap.String("lineage", local.Node), zap.Int64("lineage_version", local.Version), zap.Bool("restored", len(reasons) > 0))
	return reasons, nil
}

// bump bumps the marker's counter, conditionally on the version read, and
// judges the marker the write was conditional on (the leader's state, not
// a follower's): reasons are this node's evidence of a loss, learned a
// loss another node recorded since this node last looked, seen the loss
// count this node knew of. The write goes through the leader: a read after
// it in this session sees at least what the leader had then, so a lagging
// follower cannot pass for lost writes in later reads.
func (c *Checker) bump(conn ZK, local Local, w WitnessState) (m Marker, seen int64, reasons []string, learned string, err error) {
	root, name := c.cfg.Root, c.cfg.Cluster
	known := local.ID != ""
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			return Marker{}, 0, nil, "", fmt.Errorf("incarnation: the marker %s kept changing under 20 attempts; retrying", MarkerPath(root, name))
		}
		var st *zk.Stat
		if m, st, err = ReadMarker(conn, root, name); err != nil {
			return Marker{}, 0, nil, "", fmt.Errorf("incarnation: %w", err)
		}
		if err := c.sameIncarnation(local, w, m); err != nil {
			return Marker{}, 0, nil, "", err
		}
		next := m
		next.Counter++
		_, err = conn.Set(MarkerPath(root, name), toJSON(next.readable()), st.Version)
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil {
			return Marker{}, 0, nil, "", fmt.Errorf("incarnation: bump the counter of %s: %w", MarkerPath(root, name), err)
		}
		if w.Bound && next.Counter <= w.Counter {
			reasons = append(reasons, fmt.Sprintf("the incarnation counter in ZooKeeper is at %d but the database recorded that it reached %d: ZooKeeper went back to an older copy", m.Counter, w.Counter))
		}
		if known && m.Counter < local.Counter {
			reasons = append(reasons, fmt.Sprintf("the incarnation counter in ZooKeeper is at %d but this node bumped it to %d: ZooKeeper went back to an older copy", m.Counter, local.Counter))
		}
		if known && m.Restores < local.Restores {
			reasons = append(reasons, fmt.Sprintf("the incarnation marker counts %d detected losses but this node saw %d: ZooKeeper went back to an older copy", m.Restores, local.Restores))
		} else if known && m.Restores > local.Restores {
			learned = fmt.Sprintf("another node detected that ZooKeeper lost state (%s): %s", m.Restored, m.RestoreReason)
		}
		seen = local.Restores
		if !known {
			seen = m.Restores
		}
		return next, seen, reasons, learned, nil
	}
}

// noMarker handles a cluster without an incarnation marker: re-created
// with the ID this node or the witness recorded (ZooKeeper lost it),
// created new for a cluster from before markers (its meta is there and
// nothing recorded an ID), refused when there is no cluster at all.
func (c *Checker) noMarker(conn ZK, local Local, w WitnessState) ([]string, error) {
	root, name := c.cfg.Root, c.cfg.Cluster
	id, created, by := local.ID, local.CreatedMs, "this node"
	if id == "" && w.Bound && w.ID != "" {
		id, by = w.ID, "the database"
	}
	if id != "" {
		reason := fmt.Sprintf("ZooKeeper has no incarnation marker but %s recorded incarnation %s: ZooKeeper was wiped or restored from a copy older than the marker", by, id)
		if err := cluster.EnsurePath(conn, root, zk.WorldACL(zk.PermAll)); err != nil {
			return nil, fmt.Errorf("incarnation: %w", err)
		}
		if err := cluster.EnsurePath(conn, cluster.Path(root, name), c.cfg.ACL); err != nil {
			return nil, fmt.Errorf("incarnation: %w", err)
		}
		m := Marker{ID: id, CreatedMs: created, Counter: max(local.Counter, w.Counter), Restores: local.Restores}
		err := createMarker(conn, root, name, m, c.cfg.ACL)
		if errors.Is(err, zk.ErrNodeExists) {
			// The read came from a server behind the leader, or another
			// node re-created it first: the checks after the bump judge.
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("incarnation: %w", err)
		}
		return []string{reason}, nil
	}
	ok, _, err := conn.Exists(cluster.MetaPath(root, name))
	if err != nil {
		return nil, fmt.Errorf("incarnation: look for %s: %w", cluster.MetaPath(root, name), err)
	}
	if !ok {
		return nil, c.refuse(ErrNoCluster, fmt.Sprintf("ZooKeeper has no cluster %q under %s and neither this node nor the database recorded one. Create it once with `idctl cluster init --zk-auth-file FILE` (the digest every node then gets as --zk-auth-file: without it the cluster's znodes are open to every ZooKeeper client); if it existed and ZooKeeper lost its data, start first a node that ran in it, or run `idctl cluster restore` with one of their properties files", name, root))
	}
	// Meta without a marker and no recorded ID: a cluster created before
	// markers existed (or one whose ZooKeeper lost the marker while no
	// node or database recorded it, which nothing can tell apart).
	m, err := Create(conn, root, name, c.cfg.ACL, c.cfg.Now())
	if err == nil {
		c.log.Info("the cluster had no incarnation marker (created by an older idgen): created one", zap.String("incarnation", m.ID), zap.String("znode", MarkerPath(root, name)))
	} else if !errors.Is(err, zk.ErrNodeExists) {
		return nil, fmt.Errorf("incarnation: %w", err)
	}
	return nil, nil
}

// sameIncarnation refuses a marker whose ID is not the one this node or
// the witness recorded.
func (c *Checker) sameIncarnation(local Local, w WitnessState, m Marker) error {
	by, id := "", ""
	switch {
	case local.ID != "" && local.ID != m.ID:
		by, id = "this node's properties file", local.ID
	case w.Bound && w.ID != "" && w.ID != m.ID:
		by, id = "the database (cluster_binding)", w.ID
	default:
		return nil
	}
	return c.refuse(ErrRecreated, fmt.Sprintf("ZooKeeper holds incarnation %s (created %s) of cluster %q but %s recorded incarnation %s: the cluster was re-created (`idctl cluster init` after ZooKeeper lost its data), and this node's slots, marks and epochs belong to the old one. If ZooKeeper lost its data, remove the re-created cluster's znodes (%s) and start first a node that ran in the old cluster, or run `idctl cluster restore`; only if the new cluster is meant to replace the old one for good, remove the incarnation.* keys from this node's properties file (and `idctl db unbind` the database) and start it again",
		m.ID, rfc3339(m.CreatedMs), c.cfg.Cluster, by, id, cluster.Path(c.cfg.Root, c.cfg.Cluster)))
}

func (c *Checker) refuse(kind error, msg string) error {
	c.log.Error("cluster incarnation check refused: not serving", zap.String("reason", msg))
	if c.cfg.Refused != nil {
		return fmt.Errorf("%w: %w: %s", c.cfg.Refused, kind, msg)
	}
	return fmt.Errorf("%w: %s", kind, msg)
}

// readLineage returns this node's lineage znode (stat nil: none).
func (c *Checker) readLineage(conn ZK, local Local) (Lineage, *zk.Stat, error) {
	if local.Node == "" {
		return Lineage{}, nil, nil
	}
	p := LineagePath(c.cfg.Root, c.cfg.Cluster, local.Node)
	b, st, err := conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return Lineage{}, nil, nil
	}
	if err != nil {
		return Lineage{}, nil, fmt.Errorf("incarnation: read %s: %w", p, err)
	}
	var l Lineage
	if err := json.Unmarshal(b, &l); err != nil {
		// Only this node writes it: treat garbage as lost.
		c.log.Warn("this node's lineage znode is not valid JSON: counted as lost", zap.String("znode", p), zap.Error(err))
		return Lineage{}, st, nil
	}
	return l, st, nil
}

// judgeLineage returns why ZooKeeper lost this node's writes ("" when it
// did not): its lineage znode is missing, older than the node's record, or
// at the recorded version with another token. The pending lineage (a crash
// between the znode write and its confirmation) is accepted.
func judgeLineage(local Local, zl Lineage, exists bool) string {
	if local.Version == 0 {
		return "" // nothing confirmed yet: the first check, or a record from an older idgen
	}
	switch {
	case !exists:
		return fmt.Sprintf("this node's lineage znode is gone but it wrote version %d: ZooKeeper lost this node's writes", local.Version)
	case zl.Version == local.Version && zl.Token == local.Token:
		return ""
	case local.PendingVersion != 0 && zl.Version == local.PendingVersion && zl.Token == local.PendingToken:
		return ""
	case zl.Version < local.Version:
		return fmt.Sprintf("this node's lineage in ZooKeeper is at version %d but it wrote version %d: ZooKeeper lost this node's writes", zl.Version, local.Version)
	case zl.Version == local.Version || zl.Version == local.PendingVersion:
		return fmt.Sprintf("this node's lineage in ZooKeeper is version %d with another token than this node wrote: ZooKeeper lost this node's writes", zl.Version)
	}
	return ""
}

// writeLineage writes local's pending lineage, conditionally on the
// znode's version read before (stat nil: it must not exist).
func (c *Checker) writeLineage(conn ZK, local Local, st *zk.Stat) error {
	p := LineagePath(c.cfg.Root, c.cfg.Cluster, local.Node)
	now := c.cfg.Now().UnixMilli()
	data := toJSON(Lineage{Version: local.PendingVersion, Token: local.PendingToken, WrittenMs: now, Written: rfc3339(now)})
	var err error
	if st == nil {
		if err = cluster.EnsurePath(conn, LineageDir(c.cfg.Root, c.cfg.Cluster), c.cfg.ACL); err == nil {
			_, err = conn.Create(p, data, 0, c.cfg.ACL)
		}
	} else {
		_, err = conn.Set(p, data, st.Version)
	}
	if errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrBadVersion) {
		return fmt.Errorf("incarnation: %s changed while this node wrote it: another process uses this node's lineage (two nodes sharing one properties file?); retrying: %w", p, err)
	}
	if err != nil {
		return fmt.Errorf("incarnation: write %s: %w", p, err)
	}
	return nil
}

// noteLoss records a detected loss in the marker and, unless NoMarkMeta,
// in the cluster's meta (cluster.MarkRestored: slots taken in the next
// lead wait). In the marker: a counter above the witness's, so the next
// check does not see the same loss again, and the restore count other
// nodes learn it from, raised unless the marker counts a loss this node
// did not know of (seen is the count it knew): this evidence is then of
// that loss, and counting it again would make every node learn it twice.
// It returns the marker written.
func (c *Checker) noteLoss(conn ZK, local Local, w WitnessState, seen int64, reason string) (Marker, error) {
	root, name := c.cfg.Root, c.cfg.Cluster
	now := c.cfg.Now().UnixMilli()
	var m Marker
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			return Marker{}, fmt.Errorf("incarnation: the marker %s kept changing under 20 attempts; retrying", MarkerPath(root, name))
		}
		cur, st, err := ReadMarker(conn, root, name)
		if err != nil {
			return Marker{}, fmt.Errorf("incarnation: %w", err)
		}
		m = cur
		m.Counter = max(m.Counter, w.Counter, local.Counter) + 1
		if m.Restores <= seen {
			m.Restores = max(m.Restores, seen) + 1
			m.RestoredMs, m.RestoreReason = now, reason
		}
		_, err = conn.Set(MarkerPath(root, name), toJSON(m.readable()), st.Version)
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil {
			return Marker{}, fmt.Errorf("incarnation: record the loss in %s: %w", MarkerPath(root, name), err)
		}
		break
	}
	c.log.Error("ZooKeeper lost state (wiped or restored from an older copy): the restore rule applies",
		zap.String("reason", reason), zap.String("incarnation", m.ID), zap.Int64("restores", m.Restores))
	if !c.cfg.NoMarkMeta {
		zt, err := cluster.Now(conn, root, name, c.cfg.ACL)
		if err == nil {
			_, err = cluster.MarkRestored(conn, root, name, zt, "incarnation check: "+reason)
		}
		switch {
		case errors.Is(err, cluster.ErrNotFound):
			// No meta: the worker re-creates it marked restored.
		case err != nil:
			return Marker{}, fmt.Errorf("incarnation: mark the cluster restored: %w", err)
		}
	}
	return m, nil
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// nodeName turns a node key into a znode name with a random suffix.
func nodeName(key string) string {
	key = strings.NewReplacer("/", "_", "\x00", "_").Replace(key)
	if key == "." || key == ".." {
		key = "node"
	}
	return key + "-" + newToken()[:8]
}
