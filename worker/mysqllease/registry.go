package mysqllease

// One worker registry per cluster.
//
// A cluster holds its worker slots either in MySQL (nodes with --mysql
// alone: worker_slot) or in ZooKeeper (nodes with --zk --mysql). The two
// never read each other, so a cluster running both at once could put one
// worker ID on two nodes. worker_cluster.registry records the cluster's
// choice; a node of the other kind is refused at start (Register here,
// ClaimRegistry for ZooKeeper nodes), and the MySQL claim re-checks it
// under the cluster row's lock. Moving a stopped cluster from one registry
// to the other is Migrate (migrate.go), built from Marks, SetRegistry and
// ImportMarks.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/idgen/idgen/worker"
)

// Values of worker_cluster.registry.
const (
	// RegistryMySQL: the slots are rows of worker_slot (this package).
	RegistryMySQL = "mysql"
	// RegistryZooKeeper: the slots are held in ZooKeeper (package worker);
	// the cluster's row only records the choice.
	RegistryZooKeeper = "zookeeper"
	// RegistryMigrating: Migrate is moving the cluster; nodes of both
	// kinds are refused until it ends.
	RegistryMigrating = "migrating"
)

func knownRegistry(r string) bool {
	return r == RegistryMySQL || r == RegistryZooKeeper || r == RegistryMigrating
}

// registryMismatch is the refusal of a node (or a change) that expects
// want where the cluster's row says have; it names the fix.
func registryMismatch(cluster, have, want string) error {
	c := shellWord(cluster)
	migrate := func(to string) string {
		return fmt.Sprintf("stop every node of the cluster, then `idctl cluster migrate --cluster %s --mysql DSN --zk HOSTS --to %s`", c, to)
	}
	switch {
	case have == RegistryMySQL && want == RegistryZooKeeper:
		return fmt.Errorf("%w: cluster %q holds its worker slots in MySQL (worker_slot); this node uses ZooKeeper (--zk); refusing to start. Start it without --zk, or migrate the whole cluster: %s",
			ErrRegistryMismatch, cluster, migrate(RegistryZooKeeper))
	case have == RegistryZooKeeper && want == RegistryMySQL:
		return fmt.Errorf("%w: cluster %q holds its worker slots in ZooKeeper; this node uses MySQL (--mysql without --zk); refusing to start. Start it with --zk HOSTS, or migrate the whole cluster: %s",
			ErrRegistryMismatch, cluster, migrate(RegistryMySQL))
	case have == RegistryMigrating:
		return fmt.Errorf("%w: cluster %q is being moved between worker registries (worker_cluster.registry is %q); refusing to start. Start its nodes when `idctl cluster migrate` has finished; if it was interrupted, run it again: `idctl cluster migrate --cluster %s --mysql DSN --zk HOSTS --to mysql|zookeeper`",
			ErrRegistryMismatch, cluster, have, c)
	case !knownRegistry(have):
		return fmt.Errorf("%w: cluster %q has worker registry %q in worker_cluster, which this build does not know (written by a newer build?); refusing to start",
			ErrRegistryMismatch, cluster, have)
	}
	return fmt.Errorf("%w: cluster %q has worker registry %q in worker_cluster, not %q", ErrRegistryMismatch, cluster, have, want)
}

// shellWord quotes s for a shell command line when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func clusterDefault(cluster string) string {
	if cluster == "" {
		return worker.DefaultCluster
	}
	return cluster
}

// ClaimRegistry records that cluster holds its worker slots in registry
// (RegistryZooKeeper for nodes started with --zk --mysql; RegistryMySQL is
// what Register does by itself), or checks that it does. It inserts the
// cluster's row when there is none, with meta's settings (zero fields: the
// defaults) and created_ms = meta.CreatedMs, or the database's now when
// that is 0; pass the cluster's meta as ZooKeeper holds it, so that the
// row keeps its created_ms (the fallback floor). It refuses with
// ErrRegistryMismatch, naming the fix and the migration command, when the
// row names another registry or a migration in progress, and with
// ErrMetaMismatch (and worker.ErrMetaMismatch) when the row's epoch or bit
// split differs from meta's. It is idempotent.
//
// A ZooKeeper node calls it before taking a slot, and again after taking
// one and before serving: a migration that started in between is then
// seen (Migrate checks ZooKeeper's held slots after marking the cluster
// migrating, so a claim made before that check is seen by Migrate, and one
// made after it sees the mark here).
func ClaimRegistry(ctx context.Context, db *sql.DB, cluster, registry string, meta worker.Meta) error {
	cluster = clusterDefault(cluster)
	meta = metaDefaults(meta)
	switch {
	case db == nil:
		return invalidArg("ClaimRegistry db", "is nil")
	case registry != RegistryMySQL && registry != RegistryZooKeeper:
		return invalidArg("ClaimRegistry registry", fmt.Sprintf("is %q: must be %q or %q", registry, RegistryMySQL, RegistryZooKeeper))
	case meta.CreatedMs < 0:
		return invalidArg("ClaimRegistry meta.CreatedMs", "is negative")
	}
	if err := validCluster("ClaimRegistry cluster", cluster); err != nil {
		return err
	}
	if err := validMeta("ClaimRegistry meta", meta); err != nil {
		return err
	}
	_, err := ensureCluster(ctx, db, cluster, registry, meta)
	return err
}

// ClusterRegistry returns the registry recorded for cluster; ok is false
// when the cluster has no row (no node of it has started on this database
// with a build that records it).
func ClusterRegistry(ctx context.Context, db *sql.DB, cluster string) (registry string, ok bool, err error) {
	cluster = clusterDefault(cluster)
	err = db.QueryRowContext(ctx, `SELECT registry FROM worker_cluster WHERE cluster = ?`, cluster).Scan(&registry)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read the registry of cluster %q from worker_cluster: %w", cluster, noSchema(err))
	}
	return registry, true, nil
}

// Marks returns the high-water mark of every slot of cluster in
// worker_slot, keyed by (idc, node): no ID of the slot has a timestamp
// above it, as long as no lease is live. live reports whether some slot
// has a holder whose lease has not expired in the database's clock: then
// the marks may still grow.
func Marks(ctx context.Context, db *sql.DB, cluster string) (marks map[[2]int]int64, live bool, err error) {
	cluster = clusterDefault(cluster)
	rows, err := db.QueryContext(ctx, `SELECT idc, node, high_water_ms, holder IS NOT NULL AND lease_until_ms >= `+dbNowMs+`
FROM worker_slot WHERE cluster = ?`, cluster)
	if err != nil {
		return nil, false, fmt.Errorf("read the marks of cluster %q from worker_slot: %w", cluster, noSchema(err))
	}
	defer rows.Close()
	marks = map[[2]int]int64{}
	for rows.Next() {
		var idc, node int
		var hw int64
		var held bool
		if err := rows.Scan(&idc, &node, &hw, &held); err != nil {
			return nil, false, err
		}
		marks[[2]int{idc, node}] = hw
		live = live || held
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return marks, live, nil
}

// heldSlot is a slot whose lease is live, for messages.
type heldSlot struct {
	idc, node int
	host      string
	port      int
	untilMs   int64
}

// lockHeld locks the cluster's slot rows (inside tx, which holds the
// cluster row's lock) and returns those whose lease is live.
func lockHeld(ctx context.Context, tx *sql.Tx, cluster string) ([]heldSlot, error) {
	rows, err := tx.QueryContext(ctx, `SELECT idc, node, host, port, lease_until_ms, holder IS NOT NULL AND lease_until_ms >= `+dbNowMs+`
FROM worker_slot WHERE cluster = ? ORDER BY idc, node FOR UPDATE`, cluster)
	if err != nil {
		return nil, noSchema(err)
	}
	defer rows.Close()
	var held []heldSlot
	for rows.Next() {
		var h heldSlot
		var live bool
		if err := rows.Scan(&h.idc, &h.node, &h.host, &h.port, &h.untilMs, &live); err != nil {
			return nil, err
		}
		if live {
			held = append(held, h)
		}
	}
	return held, rows.Err()
}

func slotsHeldErr(cluster string, held []heldSlot) error {
	var b strings.Builder
	for i, h := range held {
		if i == 8 {
			fmt.Fprintf(&b, ", and %d more", len(held)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "idc %d node %d (%s:%d, lease until %s)", h.idc, h.node, h.host, h.port, rfc3339(h.untilMs))
	}
	return fmt.Errorf("%w: cluster %q: %d worker slots in MySQL (worker_slot) have a live lease: %s; stop every node of the cluster (a crashed node's lease ends by itself within its TTL), then run the migration again",
		ErrSlotsHeld, cluster, len(held), b.String())
}

// inTx runs fn in a transaction, again when the server rolled it back for
// a deadlock or a lock wait timeout.
func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	var err error
	for attempt := 1; attempt <= 8; attempt++ {
		err = func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // no-op after Commit
			if err := fn(tx); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt*10) * time.Millisecond):
		}
	}
	return err
}

// lockCluster locks the cluster's row in tx and returns its settings and
// registry (every claim locks it first, so claims wait for tx).
func lockCluster(ctx context.Context, tx *sql.Tx, cluster string) (worker.Meta, string, error) {
	var m worker.Meta
	var registry string
	err := tx.QueryRowContext(ctx, `SELECT epoch_ms, idc_bits, node_bits, created_ms, registry FROM worker_cluster WHERE cluster = ? FOR UPDATE`, cluster).
		Scan(&m.EpochMs, &m.IDCBits, &m.NodeBits, &m.CreatedMs, &registry)
	if errors.Is(err, sql.ErrNoRows) {
		return m, "", fmt.Errorf("cluster %q has no row in worker_cluster (no node of it has started with this database)", cluster)
	}
	if err != nil {
		return m, "", fmt.Errorf("lock cluster row %q of worker_cluster: %w", cluster, noSchema(err))
	}
	return m, registry, nil
}

// SetRegistry changes the cluster's registry from from to to, only if the
// row still says from (ErrRegistryMismatch otherwise: a concurrent
// migration, or a wrong expectation), and only while no MySQL lease of the
// cluster is live (ErrSlotsHeld). In the same transaction it clears the
// holder of every slot (holder NULL, lease 0, gen+1): a holder whose lease
// had expired but whose process was only paused can then write no mark
// again (its next write finds another gen and fences), so once the cluster
// has left MySQL its marks are final. Claims lock the cluster row and
// check the registry under that lock, so none commits after a change away
// from mysql. Values: RegistryMySQL, RegistryZooKeeper, RegistryMigrating.
// The ZooKeeper side is the caller's to check (see Migrate).
func SetRegistry(ctx context.Context, db *sql.DB, cluster, from, to string) error {
	cluster = clusterDefault(cluster)
	switch {
	case !knownRegistry(from):
		return invalidArg("SetRegistry from", fmt.Sprintf("is %q: must be %q, %q or %q", from, RegistryMySQL, RegistryZooKeeper, RegistryMigrating))
	case !knownRegistry(to):
		return invalidArg("SetRegistry to", fmt.Sprintf("is %q: must be %q, %q or %q", to, RegistryMySQL, RegistryZooKeeper, RegistryMigrating))
	case from == to:
		return invalidArg("SetRegistry to", fmt.Sprintf("is from (%q)", from))
	}
	return inTx(ctx, db, func(tx *sql.Tx) error {
		_, have, err := lockCluster(ctx, tx, cluster)
		if err != nil {
			return err
		}
		if have != from {
			return fmt.Errorf("%w: cluster %q: worker_cluster.registry is %q, not the expected %q (another migration ran meanwhile?); nothing changed",
				ErrRegistryMismatch, cluster, have, from)
		}
		held, err := lockHeld(ctx, tx, cluster)
		if err != nil {
			return err
		}
		if len(held) > 0 {
			return slotsHeldErr(cluster, held)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE worker_slot SET holder = NULL, lease_until_ms = 0, gen = gen + 1 WHERE cluster = ? AND holder IS NOT NULL`, cluster); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE worker_cluster SET registry = ? WHERE cluster = ? AND registry = ?`, to, cluster, from); err != nil {
			return noSchema(err)
		}
		return nil
	})
}

// ImportMarks raises the marks of the cluster's slots in worker_slot to at
// least marks[(idc, node)] (creating free rows for slots never used in
// MySQL), never lowering one, so that a MySQL holder of each slot waits
// past the timestamps the other registry's holders may have issued. It
// refuses while the cluster's registry is mysql (a live holder rewrites its
// own mark: move the cluster to RegistryMigrating first) or a MySQL lease
// is live, and marks outside the cluster's bit split.
func ImportMarks(ctx context.Context, db *sql.DB, cluster string, marks map[[2]int]int64) error {
	cluster = clusterDefault(cluster)
	keys := make([][2]int, 0, len(marks))
	for k, v := range marks {
		if v < 0 {
			return invalidArg("ImportMarks marks", fmt.Sprintf("idc %d node %d: mark %d is negative", k[0], k[1], v))
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	return inTx(ctx, db, func(tx *sql.Tx) error {
		m, registry, err := lockCluster(ctx, tx, cluster)
		if err != nil {
			return err
		}
		if registry == RegistryMySQL {
			return fmt.Errorf("%w: cluster %q holds its worker slots in MySQL: its holders write their own marks; set its registry to %q before importing marks",
				ErrRegistryMismatch, cluster, RegistryMigrating)
		}
		held, err := lockHeld(ctx, tx, cluster)
		if err != nil {
			return err
		}
		if len(held) > 0 {
			return slotsHeldErr(cluster, held)
		}
		for _, k := range keys {
			if k[0] < 0 || k[0] >= 1<<m.IDCBits || k[1] < 0 || k[1] >= 1<<m.NodeBits {
				return invalidArg("ImportMarks marks", fmt.Sprintf("slot idc %d node %d is outside cluster %q's split of %d IDC bits and %d node bits",
					k[0], k[1], cluster, m.IDCBits, m.NodeBits))
			}
			hw := marks[k]
			// gen is assigned first, so it compares with the old mark.
			if _, err := tx.ExecContext(ctx, `INSERT INTO worker_slot (cluster, idc, node, holder, host, port, pid, version, started_at_ms,
  lease_until_ms, high_water_ms, released_at_ms, heartbeat_ms, clock_offset_ms, gen)
VALUES (?, ?, ?, NULL, '', 0, 0, '', 0, 0, ?, 0, 0, 0, 1)
ON DUPLICATE KEY UPDATE gen = gen + (high_water_ms < ?), high_water_ms = GREATEST(high_water_ms, ?)`,
				cluster, k[0], k[1], hw, hw, hw); err != nil {
				return fmt.Errorf("raise the mark of idc %d node %d: %w", k[0], k[1], noSchema(err))
			}
		}
		return nil
	})
}
