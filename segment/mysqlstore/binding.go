package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idgen/idgen/internal/mysqldb"
)

// One database, one cluster. The tables of the counters and of the
// ORDERED owners (ordered_shard) are not scoped by cluster: two clusters
// on one database would take each other's ORDERED shards with epochs that
// come from two coordinators (two ZooKeeper subtrees), each dropping the
// other's owners while keeping their leases, and the per-request path of
// one would write rows the other's owners serve from memory (issue 29,
// hole k). So the database records the one cluster it belongs to
// (cluster_binding, schema 9): the first node of a cluster binds it, and
// every node with --mysql checks it at start, before it serves.
//
// A cluster is its name and its creation time (the created_ms of its
// meta, the same on every node and kept by a restore from the survivors):
// the name alone would not tell two clusters apart that were both created
// as "default", the name a node started without --cluster gets.

// ErrOtherCluster: the database belongs to another cluster. The node must
// not serve from it.
var ErrOtherCluster = errors.New("mysqlstore: the database belongs to another cluster")

// Binding is the cluster a database belongs to.
type Binding struct {
	Cluster   string
	CreatedMs int64  // the cluster's created_ms
	BoundBy   string // the node that bound it (for operators)
	BoundAt   time.Time
}

// BindCluster binds the database to cluster (created at createdMs, Unix
// ms) when it is bound to none, and checks the binding otherwise: a
// database bound to another cluster, or to a cluster of the same name
// created at another time, is refused with ErrOtherCluster and a message
// naming the fix. node names the caller in the binding. It returns the
// database's binding.
func (s *Store) BindCluster(ctx context.Context, cluster string, createdMs int64, node string) (Binding, error) {
	op := fmt.Sprintf("bind the database to cluster %q", cluster)
	if cluster == "" || createdMs <= 0 {
		return Binding{}, fmt.Errorf("mysqlstore: %s: cluster name and created_ms (%d) are required", op, createdMs)
	}
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	if _, err := s.db.ExecContext(cctx,
		`INSERT IGNORE INTO cluster_binding (id, cluster, created_ms, bound_by, bound_at) VALUES (1, ?, ?, ?, ?)`,
		cluster, createdMs, mysqldb.OwnerColumn(node), mysqldb.Now()); err != nil {
		return Binding{}, s.conn.Classify(ctx, op, err)
	}
	b, ok, err := readBinding(cctx, s.db)
	if err != nil {
		return Binding{}, s.conn.Classify(ctx, op, err)
	}
	if !ok {
		return Binding{}, fmt.Errorf("mysqlstore: %s: the binding vanished right after it was written (`idctl db unbind` run meanwhile?); start the node again", op)
	}
	return b, CheckBinding(b, cluster, createdMs, s.dbName)
}

// CheckBinding is the rule of BindCluster: a node of cluster (created at
// createdMs) may use the database named dbName, bound to b, only when b
// is that cluster, by name and creation time. Otherwise it returns
// ErrOtherCluster with a message naming the fix. Kept apart from the SQL
// so that the cluster simulator (sim/db.go) runs this rule on its
// simulated database.
func CheckBinding(b Binding, cluster string, createdMs int64, dbName string) error {
	if b.Cluster == cluster && b.CreatedMs == createdMs {
		return nil
	}
	same := ""
	if b.Cluster == cluster {
		same = fmt.Sprintf(" (another cluster of the same name: %q is the name of every cluster created without --cluster; "+
			"or this cluster re-created with `idctl cluster init` after its ZooKeeper data was lost)", cluster)
	}
	return fmt.Errorf("%w: database %q belongs to cluster %q created %s (bound by %s at %s), this node is of cluster %q created %s%s. "+
		"Two clusters on one database take each other's ORDERED shards and share counters: give each cluster its own database "+
		"(CREATE DATABASE, `idctl db migrate --mysql DSN`, then --mysql DSN on every node of the cluster). "+
		"Only if the database's cluster is gone for good (every node of it stopped), run `idctl db unbind --mysql DSN` and start this node again",
		ErrOtherCluster, dbName, b.Cluster, msTime(b.CreatedMs), b.BoundBy, b.BoundAt.Format(time.RFC3339),
		cluster, msTime(createdMs), same)
}

// Binding returns the cluster the database belongs to; ok is false when
// it is bound to none.
func (s *Store) Binding(ctx context.Context) (b Binding, ok bool, err error) {
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	b, ok, err = readBinding(cctx, s.db)
	if err != nil {
		return Binding{}, false, s.conn.Classify(ctx, "read the database's cluster binding", err)
	}
	return b, ok, nil
}

// Unbind removes the DSN's database's binding (`idctl db unbind`) and
// returns the binding it removed (ok false: there was none). The next node
// to start binds the database to its cluster.
func Unbind(ctx context.Context, dsn string) (b Binding, ok bool, err error) {
	db, mc, err := openDB(dsn, DefaultTimeout)
	if err != nil {
		return Binding{}, false, err
	}
	defer db.Close()
	op := "unbind " + redactedDSN(mc)
	b, ok, err = readBinding(ctx, db)
	if err == nil && ok {
		_, err = db.ExecContext(ctx, `DELETE FROM cluster_binding WHERE id = 1`)
	}
	if err != nil {
		return Binding{}, false, mysqldb.ClassifyErr(ctx, op, err, mc.Addr, DefaultTimeout)
	}
	return b, ok, nil
}

func readBinding(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (b Binding, ok bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT cluster, created_ms, bound_by, bound_at FROM cluster_binding WHERE id = 1`).
		Scan(&b.Cluster, &b.CreatedMs, &b.BoundBy, &b.BoundAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Binding{}, false, nil
	}
	if err != nil {
		return Binding{}, false, err
	}
	return b, true, nil
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }
