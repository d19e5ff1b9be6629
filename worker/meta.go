package worker

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
)

// The lease's side of the cluster record (package cluster): read it at
// start and after every new session, restore it when ZooKeeper lost it,
// record epoch changes and losses of state, and turn its bounds into the
// local clock.

// loadCluster reads the cluster's record, or restores it from this node's
// local copy when ZooKeeper lost it, compares this node's settings with it
// (ErrMetaMismatch) and records what a node taking a slot must wait for.
// A node that finds no record and was never a member refuses
// (ErrNoCluster): it cannot tell a new cluster from a lost one, and a
// cluster is created once, explicitly.
func (l *ZKLease) loadCluster() (Meta, error) {
	root, name := l.cfg.Root, l.cfg.Cluster
	local, hasLocal := l.localMeta()
	rec, st, err := cluster.Read(l.conn, root, name)
	if errors.Is(err, cluster.ErrNotFound) && !hasLocal {
		// Refused before writing anything under the cluster's path.
		return Meta{}, fmt.Errorf("%w: ZooKeeper (%s) has no cluster %q under %s. Create it once with `idctl cluster init --zk %s --zk-root %s --cluster %s --zk-auth-file FILE` (FILE holds the user:password every node then gets as --zk-auth-file: without it the cluster's znodes are open to every ZooKeeper client; add the cluster's --epoch, --idc-bits and --node-bits when they are not the defaults). If the cluster existed and ZooKeeper lost its data, start first a node that ran in it (it restores the record from its properties file), or run `idctl cluster restore` with one of their properties files",
			ErrNoCluster, strings.Join(l.cfg.Servers, ","), name, root, strings.Join(l.cfg.Servers, ","), root, name)
	}
	if err := cluster.EnsurePath(l.conn, l.l.clusterPath(), l.acl); err != nil {
		return Meta{}, err
	}
	now, err2 := l.zkTime()
	if err2 != nil {
		return Meta{}, err2
	}
	l.sess.NoteZxid(now.Zxid)
	ctime := int64(0)
	switch {
	case errors.Is(err, cluster.ErrNotFound):
		if err := compareMeta(local, l.cfg.Meta, l.props); err != nil {
			return Meta{}, err
		}
		reason := "ZooKeeper had no record of the cluster (wiped, or restored from a copy older than the cluster): re-created from a member's properties file"
		rec, err = cluster.Restore(l.conn, root, name, recordOf(local), now, reason, l.acl)
		if err != nil {
			return Meta{}, err
		}
		l.countLoss(reason)
		ctime = now.Ms
	case err != nil:
		return Meta{}, err
	default:
		if err := l.registryRefusal(rec); err != nil {
			return Meta{}, err
		}
		ctime = st.Ctime
		if err := compareMeta(metaOf(rec), l.cfg.Meta, "ZooKeeper"); err != nil {
			return Meta{}, fmt.Errorf("%w (%s)", err, l.l.meta())
		}
		if hasLocal && local.CreatedMs != rec.CreatedMs {
			reason := fmt.Sprintf("the cluster's created_ms in ZooKeeper (%d) differs from the one this node ran with (%d): the record was re-created after ZooKeeper lost it", rec.CreatedMs, local.CreatedMs)
			if rec, err = cluster.MarkRestored(l.conn, root, name, now, reason); err != nil {
				return Meta{}, err
			}
			l.countLoss(reason)
		}
	}
	if rec, err = l.noteEpoch(rec, now.Epoch(), now.Ms); err != nil {
		return Meta{}, err
	}
	meta := metaOf(rec)
	if hasLocal && local.CreatedMs != meta.CreatedMs {
		// Keep this node's floor: lowering it could let fallback segments
		// reach snowflake IDs this node issued.
		l.log.Error("keeping the snowflake floor this node ran with, not the re-created record's",
			zap.Int64("zk_created_ms", meta.CreatedMs), zap.Int64("started_with_ms", local.CreatedMs))
		meta.CreatedMs = local.CreatedMs
	}
	l.mu.Lock()
	l.rec, l.recCtime, l.zkNow = rec, ctime, now
	l.mu.Unlock()
	if b := rec.Bound(l.boundLead()); b > now.Ms {
		l.log.Warn("the cluster was restored or its ZooKeeper ensemble changed epoch recently: a slot taken now waits until one lead after it",
			zap.Int64("restored_ms", rec.RestoredMs), zap.Int64("zk_epoch", rec.ZKEpoch), zap.Int64("zk_epoch_seen_ms", rec.ZKEpochSeenMs),
			zap.Duration("wait", time.Duration(b-now.Ms)*time.Millisecond), zap.String("restore_reason", rec.RestoreReason),
			// A host behind ZooKeeper's clock waits that much longer (claimBound).
			zap.Duration("local_clock_offset", time.Duration(now.Local.UnixMilli()-now.Ms)*time.Millisecond))
	}
	return meta, nil
}

// noteEpoch records the ensemble's epoch in the cluster record when it
// is newer than the recorded one (seenMs: ZooKeeper's time of this
// node's first write in it). A record that never had an epoch (created
// by an older idgen) is given one without a bound; a recorded epoch newer
// than the ensemble's means ZooKeeper went back to older data.
func (l *ZKLease) noteEpoch(rec cluster.Record, epoch, seenMs int64) (cluster.Record, error) {
	root, name := l.cfg.Root, l.cfg.Cluster
	var err error
	switch {
	case rec.ZKEpoch == 0 && !rec.Init:
		// A record from an older idgen: no epoch was ever recorded.
		rec, err = cluster.NoteEpoch(l.conn, root, name, epoch, 0)
	case epoch > rec.ZKEpoch:
		l.log.Info("ZooKeeper ensemble in a new epoch (leader election or restart): slots taken in the next lead wait past it",
			zap.Int64("zk_epoch", epoch), zap.Int64("recorded_epoch", rec.ZKEpoch))
		rec, err = cluster.NoteEpoch(l.conn, root, name, epoch, seenMs)
	case epoch < rec.ZKEpoch:
		reason := fmt.Sprintf("the cluster record names ZooKeeper epoch %d but the ensemble is at epoch %d: ZooKeeper went back to older data", rec.ZKEpoch, epoch)
		if rec, err = cluster.MarkRestored(l.conn, root, name, cluster.Time{Ms: seenMs}, reason); err == nil {
			l.countLoss(reason)
		}
	}
	if err != nil {
		return cluster.Record{}, err
	}
	l.mu.Lock()
	l.knownEpoch = max(l.knownEpoch, epoch)
	l.mu.Unlock()
	return rec, nil
}

// afterWrite learns from the stat of a successful write: the highest zxid
// seen (the session's lost-writes rule, see zksession) and, on a write in a newer ensemble epoch, records
// that epoch in the cluster record so that nodes taking slots in the next
// lead wait past it. Errors are logged: the write itself succeeded.
func (l *ZKLease) afterWrite(mzxid, mtime int64) {
	l.sess.NoteZxid(mzxid)
	epoch := mzxid >> 32
	l.mu.Lock()
	known := l.knownEpoch
	l.mu.Unlock()
	if epoch <= known || mtime == 0 {
		return
	}
	rec, _, err := cluster.Read(l.conn, l.cfg.Root, l.cfg.Cluster)
	if err == nil {
		rec, err = l.noteEpoch(rec, epoch, mtime)
	}
	if err != nil {
		l.log.Warn("recording the ZooKeeper ensemble's new epoch failed; retried at the next write", zap.Int64("zk_epoch", epoch), zap.Error(err))
		return
	}
	l.mu.Lock()
	l.rec = rec
	l.mu.Unlock()
}

// stateLost records in the cluster record that ZooKeeper lost writes
// (detected by this node: its own mark went back or vanished, or the
// ensemble refused its zxid), so that every node taking a slot in the next
// lead waits past the marks lost with them.
func (l *ZKLease) stateLost(reason string) error {
	now, err := l.zkTime()
	if err != nil {
		return err
	}
	rec, err := cluster.MarkRestored(l.conn, l.cfg.Root, l.cfg.Cluster, now, reason)
	if err != nil {
		return err
	}
	l.countLoss(reason)
	l.mu.Lock()
	l.rec, l.zkNow = rec, now
	l.mu.Unlock()
	return nil
}

// zkTime reads ZooKeeper's time, with this node's clock (the one marks
// and NotBefore are in) at the answer.
func (l *ZKLease) zkTime() (cluster.Time, error) {
	now, err := cluster.Now(l.conn, l.cfg.Root, l.cfg.Cluster, l.acl)
	now.Local = l.cfg.Clock.Now()
	return now, err
}

// countLoss logs and counts a detected loss of ZooKeeper state.
func (l *ZKLease) countLoss(reason string) {
	l.mu.Lock()
	l.losses++
	l.mu.Unlock()
	l.log.Error("ZooKeeper lost state: cluster marked restored; slots taken in the next lead wait past it",
		zap.String("reason", reason), zap.Duration("lead", l.boundLead()))
}

// boundLead is how long after a loss of state (or an epoch change) a
// taker waits: the lead of every mark plus the clock skew allowed between
// nodes, whose clocks the marks were written in.
func (l *ZKLease) boundLead() time.Duration { return l.cfg.Lead() + l.cfg.MaxPeerClockSkew }

// claimBound returns, in this host's clock, the millisecond up to which a
// slot this node takes now may have been used by holders whose marks
// ZooKeeper may have lost: one lead after the last loss of state or epoch
// change of the cluster and, for a slot without a mark in a cluster not
// created by `idctl cluster init` (a legacy cluster), one lead after the
// record's creation.
//
// The bound is a floor for the milliseconds in this node's IDs, and the
// holders it protects stamped theirs with their own clocks, which nobody
// can read any more. Two readings of it are each safe under one
// assumption: converted to this host's clock with the offset read with
// it (issue 17 item 6), when those holders ran close to this host's clock
// (what the peer clock check enforces when peers answer); as ZooKeeper's
// milliseconds, when they ran close to ZooKeeper's clock (the only
// reference left after a restore, when every member znode may be gone
// and no peer answers). The later of the two is safe under either. A
// host whose clock is behind ZooKeeper's waits that much longer (the
// simulator's seed 2052: a restart 1.66 s behind, after a restore,
// converted the bound to before the milliseconds the slot's previous
// holder had just used, and issued them again).
func (l *ZKLease) claimBound(marked bool) int64 {
	l.mu.Lock()
	rec, ctime, now := l.rec, l.recCtime, l.zkNow
	l.mu.Unlock()
	b := rec.Bound(l.boundLead())
	if !marked && !rec.Init && ctime != 0 {
		b = max(b, ctime+l.boundLead().Milliseconds())
	}
	if now.Ms == 0 {
		return 0
	}
	if faultConvertedClaimBound() {
		return now.ToLocal(b)
	}
	return max(b, now.ToLocal(b))
}

// localMeta is this node's own copy of the cluster's settings: the one it
// runs with, or the one its properties file cached from an earlier run.
func (l *ZKLease) localMeta() (Meta, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.meta.CreatedMs != 0 {
		return l.meta, true
	}
	c := l.cached
	if l.hasCached && c.Cluster == l.cfg.Cluster && c.Meta.CreatedMs != 0 && c.Meta.validate("") == nil {
		return c.Meta, true
	}
	return Meta{}, false
}

func metaOf(r cluster.Record) Meta {
	return Meta{EpochMs: r.EpochMs, IDCBits: r.IDCBits, NodeBits: r.NodeBits, CreatedMs: r.CreatedMs}
}

func recordOf(m Meta) cluster.Record {
	return cluster.Record{EpochMs: m.EpochMs, IDCBits: m.IDCBits, NodeBits: m.NodeBits, CreatedMs: m.CreatedMs}
}

// compareMeta returns ErrMetaMismatch naming the first setting of have
// (stored at where, e.g. "ZooKeeper" or a file) that differs from want
// (this node's configuration). CreatedMs is not compared: it is the
// cluster's, not the node's.
func compareMeta(have, want Meta, where string) error {
	diff := func(name string, h, w int64) error {
		return fmt.Errorf("%w: %s is %d in %s but %d in this node's configuration; refusing to start",
			ErrMetaMismatch, name, h, where, w)
	}
	switch {
	case have.EpochMs != want.EpochMs:
		return fmt.Errorf("%w: epoch_ms is %d (%s) in %s but %d (%s) in this node's configuration; refusing to start",
			ErrMetaMismatch, have.EpochMs, rfc3339(have.EpochMs), where, want.EpochMs, rfc3339(want.EpochMs))
	case have.IDCBits != want.IDCBits:
		return diff("idc_bits", int64(have.IDCBits), int64(want.IDCBits))
	case have.NodeBits != want.NodeBits:
		return diff("node_bits", int64(have.NodeBits), int64(want.NodeBits))
	}
	return nil
}

// registryRefusal refuses a slot in ZooKeeper when the cluster's record
// says its slots are held elsewhere (issue 29, hole m): `idctl cluster
// migrate` writes "migrating" into the record before it looks for held
// slots, and "mysql" when done. A node whose session expired is not seen
// by that look; its re-claim reads the record (loadCluster) and, after
// claiming, reads it again (checkRegistry): a claim made before the mark
// is seen by the migration, one made after it sees the mark.
func (l *ZKLease) registryRefusal(rec cluster.Record) error {
	if rec.Registry == "" || rec.Registry == cluster.RegistryZooKeeper || faultNoRegistryFence() {
		return nil
	}
	return fmt.Errorf("%w: cluster %q's record in ZooKeeper (%s) says registry %q: `idctl cluster migrate` is moving its worker slots out of ZooKeeper or has moved them; this node takes no slot in ZooKeeper and stops issuing SNOWFLAKE IDs. Restart it with the cluster's registry once the migration has finished (without --zk for MySQL-held slots); if the migration was abandoned, run `idctl cluster migrate --cluster %s --zk HOSTS --mysql DSN --to zookeeper` to record ZooKeeper again",
		ErrRegistryMoved, l.cfg.Cluster, l.l.meta(), rec.Registry, l.cfg.Cluster)
}

// checkRegistry reads the cluster's record again after a slot was claimed
// and refuses (ErrRegistryMoved) when a migration marked it meanwhile.
func (l *ZKLease) checkRegistry() error {
	rec, _, err := cluster.Read(l.conn, l.cfg.Root, l.cfg.Cluster)
	if err != nil {
		return fmt.Errorf("read the cluster record after claiming a slot: %w", err)
	}
	return l.registryRefusal(rec)
}
