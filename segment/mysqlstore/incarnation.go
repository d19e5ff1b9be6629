package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// The database is the witness of the cluster's ZooKeeper incarnation
// (package cluster/incarnation, schema 10): beside the cluster it belongs
// to, cluster_binding keeps the incarnation marker's ID and the highest
// marker counter ZooKeeper was seen to reach. Every node raises it after
// each counter bump; a node that bumps ZooKeeper's counter to a value at
// or below it knows ZooKeeper went back to an older copy, even when it
// has no local record of its own (it starts first after the restore).
//
// The witness is written only once the database is bound (the first start
// of a node of the cluster with --mysql binds it), and only for the
// cluster it is bound to: a database of another cluster has nothing to
// say about this one's ZooKeeper.

// ZKIncarnation returns the incarnation the database recorded for
// cluster: its marker ID ("" when none yet) and the highest counter.
// bound is false when the database is bound to no cluster or to another.
func (s *Store) ZKIncarnation(ctx context.Context, cluster string) (id string, counter int64, bound bool, err error) {
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err = s.db.QueryRowContext(cctx, `SELECT zk_incarnation, zk_counter FROM cluster_binding WHERE id = 1 AND cluster = ?`, cluster).
		Scan(&id, &counter)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, s.conn.Classify(ctx, fmt.Sprintf("read cluster %q's ZooKeeper incarnation witness", cluster), err)
	}
	return id, counter, true, nil
}

// RaiseZKIncarnation raises the recorded counter of cluster to at least
// counter (never lowers it, whatever order concurrent calls land in) and
// records id when no ID is recorded yet. A database bound to no cluster or
// to another is left as it is.
func (s *Store) RaiseZKIncarnation(ctx context.Context, cluster, id string, counter int64) error {
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	_, err := s.db.ExecContext(cctx, `UPDATE cluster_binding
  SET zk_counter = GREATEST(zk_counter, ?), zk_incarnation = IF(zk_incarnation = '', ?, zk_incarnation)
  WHERE id = 1 AND cluster = ?`, counter, id, cluster)
	if err != nil {
		return s.conn.Classify(ctx, fmt.Sprintf("raise cluster %q's ZooKeeper incarnation witness", cluster), err)
	}
	return nil
}
