package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
)

// ZKRegistry is a cluster's worker registry in ZooKeeper seen from
// outside a node, for `idctl cluster migrate` (it implements
// mysqllease.ZooKeeperRegistry): the record, the slots held, the marks.
type ZKRegistry struct {
	Conn    ZK
	Root    string
	Cluster string
	Auth    string // digest credential of the cluster's ACL, "" for none
	// Lead is the nodes' lead (Config.Lead plus the allowed clock skew):
	// after a restore or an epoch change of the ensemble, marks may be
	// stale for that long, and Marks refuses until it has passed.
	Lead time.Duration
}

func (r ZKRegistry) layout() layout { return layout{root: r.Root, cluster: r.Cluster} }

// Meta returns the cluster's settings in ZooKeeper (ok false: none).
func (r ZKRegistry) Meta(ctx context.Context) (Meta, bool, error) {
	rec, _, err := cluster.Read(r.Conn, r.Root, r.Cluster)
	if errors.Is(err, cluster.ErrNotFound) {
		return Meta{}, false, nil
	}
	if err != nil {
		return Meta{}, false, err
	}
	return metaOf(rec), true, nil
}

// CreateMeta creates the cluster's record with exactly m, created_ms
// included, as a cluster created by init (its slots' marks are raised
// right after by the migration).
func (r ZKRegistry) CreateMeta(ctx context.Context, m Meta) error {
	_, err := cluster.InitAt(r.Conn, r.Root, r.Cluster, cluster.Settings{EpochMs: m.EpochMs, IDCBits: m.IDCBits, NodeBits: m.NodeBits},
		m.CreatedMs, ClusterACL(r.Auth))
	return err
}

// SetRegistry records registry in the cluster's record in ZooKeeper
// (cluster.SetRegistry); a cluster without a record there is left alone
// (no node can take a slot in it). Migrate writes "migrating" before it
// looks for held slots and the target when done: a node whose session
// expired, unseen by Held, reads the record at its re-claim and after
// it, and refuses (ErrRegistryMoved).
func (r ZKRegistry) SetRegistry(ctx context.Context, registry string) error {
	_, err := cluster.SetRegistry(r.Conn, r.Root, r.Cluster, registry)
	if errors.Is(err, cluster.ErrNotFound) {
		return nil
	}
	return err
}

// Held returns the (idc, node) of every slot a live node claims. A node
// whose session expired holds none, yet may re-claim: SetRegistry is what
// stops it.
func (r ZKRegistry) Held(ctx context.Context) ([][2]int, error) {
	var out [][2]int
	err := r.eachIDC(func(idc int) error {
		names, _, err := r.Conn.Children(r.layout().slots(idc))
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, n := range names {
			if node, err := strconv.Atoi(n); err == nil {
				out = append(out, [2]int{idc, node})
			}
		}
		return nil
	})
	return out, err
}

// Marks returns every slot's high-water mark. It refuses while the
// cluster's marks may be stale (restored or in a new ensemble epoch less
// than a lead ago) and when a mark cannot be read: a migration must not
// start other nodes below marks that were lost.
func (r ZKRegistry) Marks(ctx context.Context) (map[[2]int]int64, error) {
	rec, _, err := cluster.Read(r.Conn, r.Root, r.Cluster)
	if err != nil {
		return nil, err
	}
	now, err := cluster.Now(r.Conn, r.Root, r.Cluster, ClusterACL(r.Auth))
	if err != nil {
		return nil, err
	}
	if b := rec.Bound(r.Lead); b > now.Ms {
		return nil, fmt.Errorf("the cluster's ZooKeeper marks may be stale until %s (restored or a new ensemble epoch less than a lead ago): run the migration again then", rfc3339(b))
	}
	out := map[[2]int]int64{}
	err = r.eachIDC(func(idc int) error {
		names, _, err := r.Conn.Children(r.layout().lastDir(idc))
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, n := range names {
			node, err := strconv.Atoi(n)
			if err != nil {
				continue
			}
			b, _, err := r.Conn.Get(r.layout().last(idc, node))
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return err
			}
			d, err := decodeLast(b)
			if err != nil {
				return fmt.Errorf("%w: %s: %v (repair or delete it first)", errUnreadableMark, r.layout().last(idc, node), err)
			}
			out[[2]int{idc, node}] = d.HighWater
		}
		return nil
	})
	return out, err
}

// RaiseMarks raises each slot's last/<node> to at least marks[slot]
// (conditional writes; never lowers one).
func (r ZKRegistry) RaiseMarks(ctx context.Context, marks map[[2]int]int64) error {
	acl := ClusterACL(r.Auth)
	for k, hw := range marks {
		idc, node := k[0], k[1]
		for _, p := range []string{r.layout().idc(idc), r.layout().lastDir(idc)} {
			if err := cluster.EnsurePath(r.Conn, p, acl); err != nil {
				return err
			}
		}
		path := r.layout().last(idc, node)
		data := toJSON(lastData{HighWater: hw, HighWaterAt: rfc3339(hw), Host: "idctl cluster migrate"})
		for attempt := 0; ; attempt++ {
			if attempt == 20 {
				return fmt.Errorf("raise %s: it kept changing", path)
			}
			b, st, err := r.Conn.Get(path)
			if errors.Is(err, zk.ErrNoNode) {
				if _, err = r.Conn.Create(path, data, 0, acl); errors.Is(err, zk.ErrNodeExists) {
					continue
				}
				if err != nil {
					return fmt.Errorf("raise %s: %w", path, err)
				}
				break
			}
			if err != nil {
				return fmt.Errorf("raise %s: %w", path, err)
			}
			if d, derr := decodeLast(b); derr == nil && d.HighWater >= hw {
				break
			}
			if _, err = r.Conn.Set(path, data, st.Version); errors.Is(err, zk.ErrBadVersion) {
				continue
			} else if err != nil {
				return fmt.Errorf("raise %s: %w", path, err)
			}
			break
		}
	}
	return nil
}

// eachIDC calls f with every IDC of the cluster that has a znode.
func (r ZKRegistry) eachIDC(f func(idc int) error) error {
	kids, _, err := r.Conn.Children(r.layout().clusterPath())
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if n, ok := parseIDC(k); ok {
			if err := f(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// ClusterACL returns the ACL of a cluster's znodes: open without a digest
// credential, else all permissions for that user only.
func ClusterACL(auth string) []zk.ACL { return aclFor(auth) }
