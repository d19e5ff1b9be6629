package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
)

// WorkerInfo is one running node's worker assignment as ZooKeeper shows it.
type WorkerInfo struct {
	IDC    int
	Node   int
	Worker int
	// Member is the member znode's name (m-<guid>-<seq>).
	Member    string
	Host      string
	Port      int
	PID       int
	Version   string
	StartedAt time.Time
	Session   string // hex session id of the member
	// SlotHeld is true when slots/<Node> exists and belongs to the
	// member's session (false: the member's claim is gone, e.g. while it
	// re-claims after a session expiry).
	SlotHeld bool
	// HighWater is the slot's last/<node> mark (Unix ms) and HighWaterExact
	// whether it is an exact shutdown mark rather than a heartbeat's.
	HighWater      int64
	HighWaterExact bool
	// HasHeartbeat is false when last/<node> does not exist (yet); the two
	// fields below are then zero.
	HasHeartbeat bool
	// HeartbeatAge is ZooKeeper's current time minus last/<node>'s mtime:
	// both readings come from ZooKeeper, so neither this host's nor the
	// worker's clock error enters it.
	HeartbeatAge time.Duration
	// ClockOffset is the worker's clock minus ZooKeeper's at its last
	// heartbeat: the local send time it wrote into last/<node> minus the
	// znode's mtime (off by the one-way latency, typically a millisecond).
	ClockOffset time.Duration
	// AgeByLocalClock is true when ZooKeeper's time could not be read
	// (read-only credential) and HeartbeatAge was computed from this host's
	// clock instead.
	AgeByLocalClock bool
}

// ListWorkers returns the members of cluster (of one IDC, or all when idc
// is -1) with their slots and heartbeats, sorted by IDC, node and member.
//
// ZooKeeper's current time, needed for the heartbeat age, is read by
// touching the persistent znode /<root>/<cluster>/clock and taking the
// mtime of that write: ZooKeeper has no "what time is it" call, and the
// mtime is stamped by the same leader clock that stamped the heartbeats,
// so the age does not depend on any host's clock. If that write is not
// permitted, this host's clock is used and AgeByLocalClock is set.
func ListWorkers(ctx context.Context, c ZK, root, cluster string, idc int) ([]WorkerInfo, error) {
	return listWorkers(ctx, plainReader{c}, c, layout{root, cluster}, idc)
}

// WatchWorkers calls fn with the workers of cluster (as ListWorkers) now
// and again after every change of the znodes they come from (members,
// slots, heartbeats), until ctx ends. It uses ZooKeeper watches, one per
// znode at a time. fn's error argument reports a failed listing; watching
// goes on.
func WatchWorkers(ctx context.Context, c ZK, root, cluster string, idc int, fn func([]WorkerInfo, error)) error {
	w := newWatchReader(ctx, c)
	l := layout{root, cluster}
	for {
		ws, err := listWorkers(ctx, w, c, l, idc)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fn(ws, err)
		var wait <-chan struct{} = w.changed
		if err != nil {
			// A listing that failed may not have set its watches.
			wait = afterChan(time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait:
		}
		// Coalesce a burst of changes (a restart touches several znodes).
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		w.drain()
	}
}

func listWorkers(ctx context.Context, r reader, c ZK, l layout, idc int) ([]WorkerInfo, error) {
	if err := validateRoot(l.root); err != nil {
		return nil, err
	}
	if err := validateName("cluster", l.cluster); err != nil {
		return nil, err
	}
	names, _, err := r.children(l.clusterPath())
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("cluster %s does not exist in ZooKeeper: %w", l.clusterPath(), err)
		}
		return nil, fmt.Errorf("list %s: %w", l.clusterPath(), err)
	}
	var idcs []int
	for _, n := range names {
		if i, ok := parseIDC(n); ok && (idc < 0 || i == idc) {
			idcs = append(idcs, i)
		}
	}
	zkNow, byLocal := zkTime(c, l)
	var out []WorkerInfo
	for _, i := range idcs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ws, err := listIDC(r, l, i, zkNow, byLocal)
		if err != nil {
			return nil, err
		}
		out = append(out, ws...)
	}
	sort.Slice(out, func(a, b int) bool {
		x, y := out[a], out[b]
		if x.IDC != y.IDC {
			return x.IDC < y.IDC
		}
		if x.Node != y.Node {
			return x.Node < y.Node
		}
		return memberSeq(x.Member) < memberSeq(y.Member)
	})
	return out, nil
}

func listIDC(r reader, l layout, idc int, zkNow time.Time, byLocal bool) ([]WorkerInfo, error) {
	members, _, err := r.children(l.members(idc))
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.members(idc), err)
	}
	// Watch the claims too: a slot freed or taken changes SlotHeld.
	if _, _, err := r.children(l.slots(idc)); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("list %s: %w", l.slots(idc), err)
	}
	var out []WorkerInfo
	for _, name := range members {
		if !strings.HasPrefix(name, memberPrefix) {
			continue
		}
		b, mst, err := r.get(l.members(idc) + "/" + name)
		if errors.Is(err, zk.ErrNoNode) {
			continue // left in between
		}
		if err != nil {
			return nil, fmt.Errorf("read member %s: %w", name, err)
		}
		var d memberData
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("member %s/%s is not valid JSON (%q): %w", l.members(idc), name, truncate(b), err)
		}
		w := WorkerInfo{
			IDC: idc, Node: d.Slot, Worker: d.Worker, Member: name,
			Host: d.Host, Port: d.Port, PID: d.PID, Version: d.Version,
			StartedAt: time.UnixMilli(d.StartedAtMs).UTC(), Session: d.Session,
			AgeByLocalClock: byLocal,
		}
		if _, sst, err := r.get(l.slot(idc, d.Slot)); err == nil {
			w.SlotHeld = sst.EphemeralOwner == mst.EphemeralOwner
		} else if !errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("read slot %d: %w", d.Slot, err)
		}
		lb, lst, err := r.get(l.last(idc, d.Slot))
		switch {
		case err == nil:
			ld, derr := decodeLast(lb)
			if derr != nil {
				return nil, derr
			}
			w.HasHeartbeat = true
			w.HighWater, w.HighWaterExact = ld.HighWater, ld.Exact
			w.HeartbeatAge = zkNow.Sub(time.UnixMilli(lst.Mtime))
			if ld.WrittenAtMs > 0 {
				w.ClockOffset = time.Duration(ld.WrittenAtMs-lst.Mtime) * time.Millisecond
			}
		case !errors.Is(err, zk.ErrNoNode):
			return nil, fmt.Errorf("read heartbeat of slot %d: %w", d.Slot, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// zkTime returns ZooKeeper's current time (cluster.Now), or this host's
// time (byLocal) if the clock znode cannot be written.
func zkTime(c ZK, l layout) (now time.Time, byLocal bool) {
	t, err := cluster.Now(c, l.root, l.cluster, zk.WorldACL(zk.PermAll))
	if err != nil {
		return time.Now(), true
	}
	return time.UnixMilli(t.Ms), false
}

func afterChan(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// Workers lists the workers of the lease's cluster (one IDC, or all when
// idc is -1) over the lease's own ZooKeeper session: what the server's
// ListWorkers RPC returns.
func (l *ZKLease) Workers(ctx context.Context, idc int) ([]WorkerInfo, error) {
	return ListWorkers(ctx, l.conn, l.cfg.Root, l.cfg.Cluster, idc)
}
