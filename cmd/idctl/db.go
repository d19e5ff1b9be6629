package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idgen/idgen/segment/mysqlstore"
)

const dbUsage = `usage:
  idctl db migrate --mysql DSN   create or upgrade the schema; prints the versions applied
  idctl db version --mysql DSN   print the schema version (exit 1 if behind this build)
  idctl db check   --mysql DSN [--strict-replication]
                                 check the server is crash-safe (innodb_flush_log_at_trx_commit,
                                 sync_binlog) and every ORDERED row sits in its shard table
                                 (exit 1 if either is not so); print the replication verdict:
                                 galera, group-replication, semisync-lossless and no-replica
                                 are safe; async, semisync-degraded, semisync-after-commit and
                                 replica can lose reservations in a failover (a WARNING, exit 0;
                                 with --strict-replication these and unknown exit 1). On MySQL
                                 a full verdict needs GRANT PROCESS, REPLICATION CLIENT ON *.*;
                                 unknown names what was missing
  idctl db unbind  --mysql DSN   forget the cluster the database belongs to (each cluster needs a
                                 database of its own; the first node to start binds it). Only
                                 once every node of that cluster is stopped for good, e.g. the
                                 cluster was re-created with idctl cluster init after ZooKeeper
                                 lost its data

DSN: user:password@tcp(host:3306)/database (env IDGEN_MYSQL). The database
must exist; the grants are in segment/mysqlstore/README.md.
`

// cmdDB manages the MySQL schema.
func cmdDB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, dbUsage)
		if len(args) == 0 {
			return usageError{errors.New("db: missing subcommand")}
		}
		return nil
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("db "+sub, stderr)
	dsn := fs.String("mysql", envSecretOr("IDGEN_MYSQL"), "MySQL DSN user:pass@tcp(host:port)/db (env IDGEN_MYSQL, or a file named by IDGEN_MYSQL_FILE: keeps the password off the command line)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long (migrate waits for another node's migration)")
	var strictRepl *bool
	switch sub {
	case "check":
		strictRepl = fs.Bool("strict-replication", false, "fail (exit 1) when the replication verdict is lossy or unknown, not just warn")
	case "migrate", "version", "unbind":
	default:
		fmt.Fprint(stderr, dbUsage)
		return usageError{fmt.Errorf("db: unknown subcommand %q", sub)}
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("db %s: unexpected argument %q", sub, fs.Arg(0))}
	}
	if *dsn == "" {
		return usageError{fmt.Errorf("db %s: --mysql DSN (or IDGEN_MYSQL, or IDGEN_MYSQL_FILE) is required", sub)}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch sub {
	case "migrate":
		return dbMigrate(ctx, *dsn, stdout)
	case "version":
		return dbVersion(ctx, *dsn, stdout)
	case "unbind":
		return dbUnbind(ctx, *dsn, stdout)
	default:
		return dbCheck(ctx, *dsn, *strictRepl, stdout)
	}
}

func dbMigrate(ctx context.Context, dsn string, stdout io.Writer) error {
	applied, err := mysqlstore.Migrate(ctx, dsn)
	for _, m := range applied {
		fmt.Fprintf(stdout, "applied schema version %d: %s\n", m.Version, m.Description)
	}
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "schema is up to date (version %d)\n", mysqlstore.LatestVersion())
	}
	return nil
}

func dbVersion(ctx context.Context, dsn string, stdout io.Writer) error {
	cur, latest, err := mysqlstore.SchemaVersion(ctx, dsn)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema version %d (this build needs %d)\n", cur, latest)
	if cur < latest {
		return fmt.Errorf("schema is behind: run `idctl db migrate --mysql DSN`")
	}
	return nil
}

// dbUnbind removes the database's cluster binding and says which cluster
// it named.
func dbUnbind(ctx context.Context, dsn string, stdout io.Writer) error {
	b, ok, err := mysqlstore.Unbind(ctx, dsn)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(stdout, "the database belongs to no cluster; the first node to start binds it")
		return nil
	}
	fmt.Fprintf(stdout, "unbound cluster %q (created_ms %d, bound by %s at %s); the next node to start binds the database to its cluster\n",
		b.Cluster, b.CreatedMs, b.BoundBy, b.BoundAt.Format(time.RFC3339))
	return nil
}

// dbCheck prints the durability verdict, the replication verdict and the
// shard check; it fails if durability or the shards have a problem, or
// (strictRepl) replication is lossy or unknown. Every check runs either
// way.
func dbCheck(ctx context.Context, dsn string, strictRepl bool, stdout io.Writer) error {
	d, err := mysqlstore.CheckDurabilityDSN(ctx, dsn)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "durability: %s\n", d)
	var failed error
	if !d.Safe() {
		failed = fmt.Errorf("%w: idgen refuses this server unless started with %s", mysqlstore.ErrUnsafeDurability, mysqlstore.AcceptUnsafeFlag)
	}
	r, _ := mysqlstore.CheckReplicationDSN(ctx, dsn) // an error comes back as the unknown verdict, with it
	failed = errors.Join(failed, printReplication(stdout, r, strictRepl))
	rep, err := mysqlstore.CheckShardsDSN(ctx, dsn)
	if err != nil {
		return errors.Join(failed, err)
	}
	fmt.Fprintf(stdout, "%d ORDERED rows checked, %d not in their shard table", rep.Rows, rep.Misplaced)
	if rep.Misplaced > 0 {
		fmt.Fprintf(stdout, " (%d placed by (hashCode & 0x7fffffff) %% 64)", rep.MaskPlaced)
	}
	fmt.Fprintln(stdout)
	for _, m := range rep.Examples {
		fmt.Fprintf(stdout, "  %s %q: in ordered_%02d, expected ordered_%02d\n", m.Biz, m.SubKey, m.Table, m.Want)
	}
	return errors.Join(failed, rep.Err())
}

// printReplication prints the line "replication: VERDICT (...)", marked
// WARNING when a failover can lose reservations or the setup could not be
// read. It returns an error for those only when strict.
func printReplication(w io.Writer, r mysqlstore.Replication, strict bool) error {
	if r.Safe() {
		fmt.Fprintf(w, "replication: %s\n", r)
		return nil
	}
	fmt.Fprintf(w, "replication: WARNING: %s\n", r)
	if !strict {
		return nil
	}
	what := "lossy"
	if !r.Lossy() {
		what = "unknown"
	}
	return fmt.Errorf("replication verdict %s is %s (--strict-replication)", r.Verdict, what)
}
