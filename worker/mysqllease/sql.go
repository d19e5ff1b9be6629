package mysqllease

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idgen/idgen/internal/mysqlerr"
	"github.com/idgen/idgen/worker"
)

// dbNowMs is the database's current time in Unix milliseconds. It is
// computed from UTC_TIMESTAMP, so neither the session's time_zone nor a
// daylight-saving change of the server's zone can shift it (UNIX_TIMESTAMP
// of a local NOW() is ambiguous for an hour a year).
const dbNowMs = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"

// retryable: the transaction was rolled back by the server because of
// concurrent claims; running it again is safe.
func retryable(err error) bool {
	n := mysqlerr.Number(err)
	return n == mysqlerr.LockDeadlock || n == mysqlerr.LockWaitTimeout
}

func noSchema(err error) error {
	switch mysqlerr.Number(err) {
	case mysqlerr.NoSuchTable:
		return fmt.Errorf("%w (%v): run `idctl db migrate --mysql DSN` (schema version 2 adds worker_cluster and worker_slot)", ErrNoSchema, err)
	case mysqlerr.BadField:
		return fmt.Errorf("%w (%v): run `idctl db migrate --mysql DSN` (schema version 4 adds worker_cluster.registry)", ErrNoSchema, err)
	}
	return err
}

// newInstanceID returns a random RFC 4122 version 4 UUID: the holder
// column of the slots this lease instance takes. A row whose holder is
// this id was last written by this instance and no one else.
func newInstanceID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// ensureCluster inserts the cluster's row with want and registry unless it
// exists (created_ms = want.CreatedMs, or the database's now when that is
// 0), then checks the stored row: its registry must be registry (a node of
// the other kind would run a second, independent registry of the same
// slots), and its settings want's, which decide the ID layout, so a node
// that disagrees must not issue any.
func ensureCluster(ctx context.Context, db *sql.DB, cluster, registry string, want worker.Meta) (worker.Meta, error) {
	if _, err := db.ExecContext(ctx,
		`INSERT IGNORE INTO worker_cluster (cluster, epoch_ms, idc_bits, node_bits, created_ms, registry) VALUES (?, ?, ?, ?, IF(? > 0, ?, `+dbNowMs+`), ?)`,
		cluster, want.EpochMs, want.IDCBits, want.NodeBits, want.CreatedMs, want.CreatedMs, registry); err != nil {
		return worker.Meta{}, fmt.Errorf("create cluster row %q in worker_cluster: %w", cluster, noSchema(err))
	}
	got, have, err := readCluster(ctx, db, cluster)
	if err != nil {
		return worker.Meta{}, err
	}
	if have != registry {
		return worker.Meta{}, registryMismatch(cluster, have, registry)
	}
	if err := compareMeta(got, want, cluster); err != nil {
		return worker.Meta{}, err
	}
	return got, nil
}

// readCluster reads the cluster's row: its settings and registry.
func readCluster(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, cluster string) (worker.Meta, string, error) {
	var m worker.Meta
	var registry string
	err := q.QueryRowContext(ctx, `SELECT epoch_ms, idc_bits, node_bits, created_ms, registry FROM worker_cluster WHERE cluster = ?`, cluster).
		Scan(&m.EpochMs, &m.IDCBits, &m.NodeBits, &m.CreatedMs, &registry)
	if errors.Is(err, sql.ErrNoRows) {
		return m, "", fmt.Errorf("cluster %q has no row in worker_cluster (no node of it has started with this database)", cluster)
	}
	if err != nil {
		return m, "", fmt.Errorf("read cluster row %q from worker_cluster: %w", cluster, noSchema(err))
	}
	return m, registry, nil
}

func readMeta(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, cluster string) (worker.Meta, error) {
	var m worker.Meta
	err := q.QueryRowContext(ctx, `SELECT epoch_ms, idc_bits, node_bits, created_ms FROM worker_cluster WHERE cluster = ?`, cluster).
		Scan(&m.EpochMs, &m.IDCBits, &m.NodeBits, &m.CreatedMs)
	if errors.Is(err, sql.ErrNoRows) {
		return m, fmt.Errorf("cluster %q has no row in worker_cluster (no node of it has started with --mysql alone)", cluster)
	}
	if err != nil {
		return m, fmt.Errorf("read cluster row %q from worker_cluster: %w", cluster, noSchema(err))
	}
	return m, nil
}

// compareMeta names the first setting of the stored row that differs from
// this node's configuration (created_ms is the cluster's, not compared).
func compareMeta(have, want worker.Meta, cluster string) error {
	where := fmt.Sprintf("MySQL (worker_cluster, cluster %q)", cluster)
	diff := func(name string, h, w int64) error {
		return fmt.Errorf("%w: %w: %s is %d in %s but %d in this node's configuration; refusing to start (start the node with the cluster's setting, or use another cluster name)",
			ErrMetaMismatch, worker.ErrMetaMismatch, name, h, where, w)
	}
	switch {
	case have.EpochMs != want.EpochMs:
		return fmt.Errorf("%w: %w: epoch_ms is %d (%s) in %s but %d (%s) in this node's configuration; refusing to start (start the node with the cluster's epoch, or use another cluster name)",
			ErrMetaMismatch, worker.ErrMetaMismatch, have.EpochMs, rfc3339(have.EpochMs), where, want.EpochMs, rfc3339(want.EpochMs))
	case have.IDCBits != want.IDCBits:
		return diff("idc_bits", int64(have.IDCBits), int64(want.IDCBits))
	case have.NodeBits != want.NodeBits:
		return diff("node_bits", int64(have.NodeBits), int64(want.NodeBits))
	}
	return nil
}

func rfc3339(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
