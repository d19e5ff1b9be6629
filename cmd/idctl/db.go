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
  idctl db check   --mysql DSN   check the server is crash-safe (innodb_flush_log_at_trx_commit,
                                 sync_binlog) and every ORDERED row sits in its shard table
                                 (exit 1 if either is not so)

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
	dsn := fs.String("mysql", envOr("IDGEN_MYSQL", ""), "MySQL DSN user:pass@tcp(host:port)/db (env IDGEN_MYSQL)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long (migrate waits for another node's migration)")
	switch sub {
	case "migrate", "version", "check":
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
		return usageError{fmt.Errorf("db %s: --mysql DSN (or IDGEN_MYSQL) is required", sub)}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch sub {
	case "migrate":
		return dbMigrate(ctx, *dsn, stdout)
	case "version":
		return dbVersion(ctx, *dsn, stdout)
	default:
		return dbCheck(ctx, *dsn, stdout)
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

// dbCheck prints the durability verdict and the shard check; it fails if
// either finds a problem (both are run either way).
func dbCheck(ctx context.Context, dsn string, stdout io.Writer) error {
	d, err := mysqlstore.CheckDurabilityDSN(ctx, dsn)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "durability: %s\n", d)
	var durErr error
	if !d.Safe() {
		durErr = fmt.Errorf("%w: idgen refuses this server unless started with %s", mysqlstore.ErrUnsafeDurability, mysqlstore.AcceptUnsafeFlag)
	}
	rep, err := mysqlstore.CheckShardsDSN(ctx, dsn)
	if err != nil {
		return errors.Join(durErr, err)
	}
	fmt.Fprintf(stdout, "%d ORDERED rows checked, %d not in their shard table", rep.Rows, rep.Misplaced)
	if rep.Misplaced > 0 {
		fmt.Fprintf(stdout, " (%d placed by (hashCode & 0x7fffffff) %% 64)", rep.MaskPlaced)
	}
	fmt.Fprintln(stdout)
	for _, m := range rep.Examples {
		fmt.Fprintf(stdout, "  %s %q: in ordered_%02d, expected ordered_%02d\n", m.Biz, m.SubKey, m.Table, m.Want)
	}
	return errors.Join(durErr, rep.Err())
}
