package mysqllease

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/worker"
)

// ZooKeeperRegistry is the ZooKeeper half of a registry migration, for one
// cluster (package worker implements it; this package cannot import a
// ZooKeeper client without a cycle). Marks are Unix milliseconds in the
// holders' clocks, keyed by (idc, node), as in worker_slot.
type ZooKeeperRegistry interface {
	// Meta returns the cluster's meta in ZooKeeper; ok is false when
	// ZooKeeper has none.
	Meta(ctx context.Context) (m worker.Meta, ok bool, err error)
	// CreateMeta creates the cluster's meta with exactly m (its CreatedMs
	// too: the fallback floor must not move). Migrate calls it only when
	// Meta reported none, and raises the marks of every slot MySQL ever
	// used right after, so the cluster counts as created, not restored.
	CreateMeta(ctx context.Context, m worker.Meta) error
	// Held returns the slots a live node holds (an ephemeral claim).
	Held(ctx context.Context) ([][2]int, error)
	// Marks returns the high-water mark of every slot that has one.
	Marks(ctx context.Context) (map[[2]int]int64, error)
	// RaiseMarks raises each slot's mark to at least marks[slot], never
	// lowering one, durably before it returns.
	RaiseMarks(ctx context.Context, marks map[[2]int]int64) error
	// SetRegistry records registry in the cluster's record in ZooKeeper
	// (nothing when there is no record). A ZooKeeper node takes a slot
	// only while it says zookeeper, and reads it again after each claim:
	// that is what stops a node whose session expired (Held cannot see
	// it) from re-claiming during or after a migration (issue 29, m).
	SetRegistry(ctx context.Context, registry string) error
}

// MigrateConfig configures Migrate.
type MigrateConfig struct {
	// DB holds worker_cluster and worker_slot (schema 4). Required.
	DB *sql.DB
	// Cluster to move. Default "default".
	Cluster string
	// To is RegistryZooKeeper or RegistryMySQL.
	To string
	// ZooKeeper is the cluster in ZooKeeper. Required.
	ZooKeeper ZooKeeperRegistry
	// Logger receives one line per step. nil: none.
	Logger *zap.Logger
}

// Migrate moves a stopped cluster's worker slots to cfg.To (`idctl
// cluster migrate`). It refuses, changing nothing, while a node holds a
// slot in either registry (ErrSlotsHeld), or when the two registries'
// settings differ (ErrMetaMismatch). The steps:
//
//  1. worker_cluster.registry: from -> migrating, in one transaction that
//     refuses with a live MySQL lease and fences every expired MySQL holder
//     (SetRegistry). From then on no node of either kind starts (both check
//     the registry), and the MySQL marks are final.
//  2. The cluster's record in ZooKeeper says migrating too (SetRegistry),
//     then ZooKeeper must hold no slot (Held), checked after both marks,
//     so a ZooKeeper node that claimed before them is seen, and one that
//     claims after them sees migrating when it re-checks: at start in
//     MySQL (ClaimRegistry), at every claim and re-claim in ZooKeeper's
//     record. A node whose session expired holds no slot, so Held cannot
//     see it; its next claim is one made after the mark.
//  3. The settings: to ZooKeeper, the meta is created there from MySQL's
//     row when missing (same created_ms), else must agree and be no newer;
//     to MySQL, the row's created_ms is lowered to ZooKeeper's if later.
//     The fallback floor never rises over IDs already issued.
//  4. The marks: every slot's mark in the target is raised to the
//     source's (never lowered), so each slot's next holder waits past
//     every timestamp an earlier holder may have issued. To MySQL,
//     ZooKeeper is read again afterwards: a slot held or a mark moved
//     means a node ran, and the migration is abandoned.
//  5. The ZooKeeper record, then worker_cluster.registry: migrating -> to
//     (a record saying mysql keeps refusing ZooKeeper nodes for good).
//
// On a failure after step 1 the registry is set back to its old value
// (raised marks only make holders wait); if that fails too, it stays
// migrating and running Migrate again finishes the move from any step.
// Migrating a cluster that already uses cfg.To only makes ZooKeeper's
// record say so (it repairs a record left migrating).
func Migrate(ctx context.Context, cfg MigrateConfig) (err error) {
	cluster := clusterDefault(cfg.Cluster)
	switch {
	case cfg.DB == nil:
		return invalidArg("MigrateConfig.DB", "is nil")
	case cfg.ZooKeeper == nil:
		return invalidArg("MigrateConfig.ZooKeeper", "is nil")
	case cfg.To != RegistryMySQL && cfg.To != RegistryZooKeeper:
		return invalidArg("MigrateConfig.To", fmt.Sprintf("is %q: must be %q or %q", cfg.To, RegistryMySQL, RegistryZooKeeper))
	}
	if err := validCluster("MigrateConfig.Cluster", cluster); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("cluster", cluster), zap.String("to", cfg.To))
	db, zk := cfg.DB, cfg.ZooKeeper

	from, ok, err := ClusterRegistry(ctx, db, cluster)
	if err != nil {
		return err
	}
	if !ok {
		// No node has recorded the cluster in MySQL: it can only have run
		// on ZooKeeper (before registries were recorded). Record that.
		zm, zok, err := zk.Meta(ctx)
		if err != nil {
			return fmt.Errorf("read cluster %q's meta from ZooKeeper: %w", cluster, err)
		}
		if !zok {
			return fmt.Errorf("cluster %q exists neither in MySQL (worker_cluster) nor in ZooKeeper: nothing to migrate (create it with `idctl cluster init`, or start its nodes)", cluster)
		}
		if err := ClaimRegistry(ctx, db, cluster, RegistryZooKeeper, zm); err != nil {
			return err
		}
		from = RegistryZooKeeper
		log.Info("cluster recorded in worker_cluster as held in ZooKeeper (it had no row)")
	}
	if from == cfg.To {
		if err := zk.SetRegistry(ctx, cfg.To); err != nil {
			return fmt.Errorf("record registry %q in cluster %q's ZooKeeper record: %w", cfg.To, cluster, err)
		}
		log.Info("cluster already uses this worker registry: nothing to do")
		return nil
	}
	if !knownRegistry(from) {
		return registryMismatch(cluster, from, cfg.To)
	}
	if err := zkNoneHeld(ctx, zk, cluster); err != nil {
		return err
	}

	if from != RegistryMigrating {
		if err := SetRegistry(ctx, db, cluster, from, RegistryMigrating); err != nil {
			return err
		}
		log.Info("registry set to migrating: nodes of both kinds are refused until the end", zap.String("from", from))
		defer func() {
			if err == nil {
				return
			}
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if rerr := SetRegistry(rctx, db, cluster, RegistryMigrating, from); rerr != nil {
				err = fmt.Errorf("%w; the registry stays %q (restoring %q failed: %v): run the migration again once the cause is fixed", err, RegistryMigrating, from, rerr)
				return
			}
			if rerr := zk.SetRegistry(rctx, from); rerr != nil {
				// MySQL says from; ZooKeeper's record may still say
				// migrating, refusing ZooKeeper nodes: a rerun to from
				// repairs it.
				err = fmt.Errorf("%w; the cluster still uses %s, but restoring %q in its ZooKeeper record failed (%v): ZooKeeper nodes refuse to take slots until `idctl cluster migrate --to %s` is run again",
					err, from, from, rerr, from)
				return
			}
			log.Warn("migration abandoned: registry set back", zap.String("registry", from), zap.Error(err))
			err = fmt.Errorf("%w; nothing moved: the cluster still uses %s", err, from)
		}()
	} else {
		log.Info("resuming an interrupted migration (registry is migrating)")
	}
	if err := zk.SetRegistry(ctx, RegistryMigrating); err != nil {
		return fmt.Errorf("record registry %q in cluster %q's ZooKeeper record: %w", RegistryMigrating, cluster, err)
	}
	if err := zkNoneHeld(ctx, zk, cluster); err != nil {
		return err
	}
	if cfg.To == RegistryZooKeeper {
		err = migrateToZooKeeper(ctx, db, zk, cluster, log)
	} else {
		err = migrateToMySQL(ctx, db, zk, cluster, log)
	}
	if err != nil {
		return err
	}
	if err := zk.SetRegistry(ctx, cfg.To); err != nil {
		return fmt.Errorf("record registry %q in cluster %q's ZooKeeper record: %w", cfg.To, cluster, err)
	}
	if err := SetRegistry(ctx, db, cluster, RegistryMigrating, cfg.To); err != nil {
		return err
	}
	log.Info("cluster migrated: start its nodes with the new registry")
	return nil
}

func zkNoneHeld(ctx context.Context, zk ZooKeeperRegistry, cluster string) error {
	held, err := zk.Held(ctx)
	if err != nil {
		return fmt.Errorf("read cluster %q's held slots from ZooKeeper: %w", cluster, err)
	}
	if len(held) > 0 {
		return fmt.Errorf("%w: cluster %q: %d worker slots are held in ZooKeeper (first: idc %d node %d); stop every node of the cluster (a crashed node's claim ends with its session), then run the migration again",
			ErrSlotsHeld, cluster, len(held), held[0][0], held[0][1])
	}
	return nil
}

// sameLayout refuses settings that differ between the two registries:
// a slot's worker ID, hence what its mark protects, depends on them.
func sameLayout(cluster string, my, zm worker.Meta) error {
	if my.EpochMs != zm.EpochMs || my.IDCBits != zm.IDCBits || my.NodeBits != zm.NodeBits {
		return fmt.Errorf("%w: %w: cluster %q has epoch_ms %d, idc_bits %d, node_bits %d in MySQL (worker_cluster) but %d, %d, %d in ZooKeeper; the marks of one cannot protect the slots of the other: use another cluster name in the target, or fix the meta",
			ErrMetaMismatch, worker.ErrMetaMismatch, cluster, my.EpochMs, my.IDCBits, my.NodeBits, zm.EpochMs, zm.IDCBits, zm.NodeBits)
	}
	return nil
}

func readClusterRow(ctx context.Context, db *sql.DB, cluster string) (worker.Meta, error) {
	m, _, err := readCluster(ctx, db, cluster)
	return m, err
}

func migrateToZooKeeper(ctx context.Context, db *sql.DB, zk ZooKeeperRegistry, cluster string, log *zap.Logger) error {
	my, err := readClusterRow(ctx, db, cluster)
	if err != nil {
		return err
	}
	zm, ok, err := zk.Meta(ctx)
	if err != nil {
		return fmt.Errorf("read cluster %q's meta from ZooKeeper: %w", cluster, err)
	}
	if !ok {
		if err := zk.CreateMeta(ctx, my); err != nil {
			return fmt.Errorf("create cluster %q's meta in ZooKeeper: %w", cluster, err)
		}
		log.Info("meta created in ZooKeeper from worker_cluster", zap.Int64("created_ms", my.CreatedMs))
		if zm, ok, err = zk.Meta(ctx); err != nil || !ok {
			return fmt.Errorf("read cluster %q's meta back from ZooKeeper: ok %v, %v", cluster, ok, err)
		}
		// Created saying zookeeper: migrating until the move ends.
		if err := zk.SetRegistry(ctx, RegistryMigrating); err != nil {
			return fmt.Errorf("record registry %q in cluster %q's ZooKeeper record: %w", RegistryMigrating, cluster, err)
		}
	}
	if err := sameLayout(cluster, my, zm); err != nil {
		return err
	}
	if zm.CreatedMs > my.CreatedMs {
		return fmt.Errorf("%w: %w: cluster %q was created at %s in ZooKeeper, after %s in MySQL (worker_cluster): the fallback floor would rise over SNOWFLAKE IDs the cluster already issued; no node holds a slot in ZooKeeper, so delete its meta there and run the migration again (it creates the meta with MySQL's created_ms)",
			ErrMetaMismatch, worker.ErrMetaMismatch, cluster, rfc3339(zm.CreatedMs), rfc3339(my.CreatedMs))
	}
	marks, live, err := Marks(ctx, db, cluster)
	if err != nil {
		return err
	}
	if live {
		// SetRegistry cleared every holder; only a node of an older build
		// (which does not check the registry) could have claimed since.
		return fmt.Errorf("%w: cluster %q: a MySQL lease became live after the registry was set to migrating (a node of a build from before worker registries?); stop it, then run the migration again",
			ErrSlotsHeld, cluster)
	}
	if err := zk.RaiseMarks(ctx, marks); err != nil {
		return fmt.Errorf("raise cluster %q's marks in ZooKeeper: %w", cluster, err)
	}
	log.Info("marks raised in ZooKeeper above MySQL's", zap.Int("slots", len(marks)), zap.Int64("highest", highest(marks)))
	return nil
}

func migrateToMySQL(ctx context.Context, db *sql.DB, zk ZooKeeperRegistry, cluster string, log *zap.Logger) error {
	my, err := readClusterRow(ctx, db, cluster)
	if err != nil {
		return err
	}
	zm, ok, err := zk.Meta(ctx)
	if err != nil {
		return fmt.Errorf("read cluster %q's meta from ZooKeeper: %w", cluster, err)
	}
	if !ok {
		return fmt.Errorf("cluster %q has no meta in ZooKeeper (wiped or never created there?): its marks are unknown, so it cannot be moved to MySQL safely; restore ZooKeeper, or use a new cluster name", cluster)
	}
	if err := sameLayout(cluster, my, zm); err != nil {
		return err
	}
	if zm.CreatedMs < my.CreatedMs {
		// The ZooKeeper nodes used ZooKeeper's floor; the lower floor keeps
		// every segment below every SNOWFLAKE ID of both eras.
		if _, err := db.ExecContext(ctx, `UPDATE worker_cluster SET created_ms = ? WHERE cluster = ? AND created_ms > ?`, zm.CreatedMs, cluster, zm.CreatedMs); err != nil {
			return fmt.Errorf("set cluster %q's created_ms to ZooKeeper's: %w", cluster, noSchema(err))
		}
		log.Info("created_ms set to ZooKeeper's", zap.Int64("created_ms", zm.CreatedMs), zap.Int64("was", my.CreatedMs))
	}
	marks, err := zk.Marks(ctx)
	if err != nil {
		return fmt.Errorf("read cluster %q's marks from ZooKeeper: %w", cluster, err)
	}
	if err := ImportMarks(ctx, db, cluster, marks); err != nil {
		return err
	}
	// A node that took a slot before the registry said migrating and was
	// slow to show it: seen now, or it sees migrating when it re-checks.
	if err := zkNoneHeld(ctx, zk, cluster); err != nil {
		return err
	}
	again, err := zk.Marks(ctx)
	if err != nil {
		return fmt.Errorf("read cluster %q's marks from ZooKeeper again: %w", cluster, err)
	}
	for k, v := range again {
		if v > marks[k] {
			return fmt.Errorf("%w: cluster %q: the mark of idc %d node %d moved in ZooKeeper during the migration (%d, then %d): a node is running; stop it, then run the migration again",
				ErrSlotsHeld, cluster, k[0], k[1], marks[k], v)
		}
	}
	log.Info("marks imported into worker_slot above ZooKeeper's", zap.Int("slots", len(marks)), zap.Int64("highest", highest(marks)))
	return nil
}

func highest(marks map[[2]int]int64) int64 {
	var h int64
	for _, v := range marks {
		h = max(h, v)
	}
	return h
}
