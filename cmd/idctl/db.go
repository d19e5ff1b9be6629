package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idgen/idgen/internal/idctlenv"
	"github.com/idgen/idgen/segment/mysqlstore"
)

// dbSynopsis is the usage line of each db subcommand, and what it does in
// a few words.
var dbSynopsis = map[string][2]string{
	"migrate": {"idctl db migrate --mysql-file F [--timeout D]", "create or upgrade the schema; prints the versions applied"},
	"version": {"idctl db version --mysql-file F", "print the schema version (exit 1 if behind this build)"},
	"check":   {"idctl db check   --mysql-file F [--strict-replication]", "check the server is crash-safe and every ORDERED row sits in its shard table"},
	"unbind":  {"idctl db unbind  --mysql-file F", "forget the cluster the database belongs to"},
}

var dbSubs = []string{"migrate", "version", "check", "unbind"}

// dbAbout is the text of each db subcommand's help.
var dbAbout = map[string]string{
	"migrate": "Creates or upgrades the schema and prints the versions applied. Several nodes\nor idctl runs may migrate at once: one migrates, the others wait for it.\n\n" + dbDSNHelp,
	"version": "Prints the schema version; exits 1 if it is behind this build.\n\n" + dbDSNHelp,
	"check": `Checks the server is crash-safe (innodb_flush_log_at_trx_commit, sync_binlog)
and every ORDERED row sits in its shard table (exit 1 if either is not so),
and prints the replication verdict: galera, group-replication,
semisync-lossless and no-replica are safe; async, semisync-degraded,
semisync-after-commit and replica can lose reservations in a failover (a
WARNING, exit 0; with --strict-replication these and unknown exit 1). On
MySQL a full verdict needs GRANT PROCESS, REPLICATION CLIENT ON *.*; unknown
names what was missing.

` + dbDSNHelp,
	"unbind": `Forgets the cluster the database belongs to (each cluster needs a database of
its own; the first node to start binds it). Only once every node of that
cluster is stopped for good, e.g. the cluster was re-created with idctl
cluster init after ZooKeeper lost its data.

` + dbDSNHelp,
}

// dbDSNHelp is how every db subcommand takes the database.
const dbDSNHelp = `The DSN, user:password@tcp(host:3306)/database, is --mysql-file F (a file
holding it, env IDGEN_MYSQL_FILE: keeps the password off the command line) or
--mysql DSN (env IDGEN_MYSQL), as the nodes take it. The database must exist;
the grants are in segment/mysqlstore/README.md.
`

// dbUsage is the help of idctl db.
func dbUsage() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, sub := range dbSubs {
		fmt.Fprintf(&b, "  %-58s %s\n", dbSynopsis[sub][0], dbSynopsis[sub][1])
	}
	b.WriteString("\n" + dbDSNHelp + "Run 'idctl db SUBCOMMAND --help' for the flags and the text of one.\n")
	return b.String()
}

// addMySQLFlags adds --mysql and --mysql-file (env IDGEN_MYSQL,
// IDGEN_MYSQL_FILE), the DSN of a command that dials MySQL.
func addMySQLFlags(fs *cmdFlags) *secretFlags {
	return fs.secret("mysql", idctlenv.MySQL, "MySQL `DSN` user:pass@tcp(host:port)/db", preferFile("mysql"))
}

// required returns the secret, refusing the command line without it.
func (s *secretFlags) required() (string, error) {
	v, err := s.get()
	if err == nil && v == "" {
		err = s.fs.usageErr("--%s-file F or --%s (env %s_FILE or %s) is required", s.flag, s.flag, s.env, s.env)
	}
	return v, err
}

// cmdDB manages the MySQL schema.
func cmdDB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageHint{usageError{errors.New("db: missing subcommand: want migrate, version, check or unbind")}, "\n" + dbUsage()}
	}
	sub, args := args[0], args[1:]
	if isHelpArg(sub) || sub == "help" {
		return &helpRequest{func(w io.Writer) { fmt.Fprint(w, dbUsage()) }}
	}
	if _, ok := dbSynopsis[sub]; !ok {
		return &usageHint{usageError{fmt.Errorf("db: unknown subcommand %q: want migrate, version, check or unbind", sub)}, "\n" + dbUsage()}
	}
	fs := newCmdFlags("db "+sub, strings.Join(strings.Fields(dbSynopsis[sub][0]), " "), dbAbout[sub], stderr)
	dsnFlags := addMySQLFlags(fs)
	timeoutHelp := "give up after this long"
	if sub == "migrate" {
		timeoutHelp += " (migrate waits for another node's or idctl's migration)"
	}
	timeout := fs.Duration("timeout", 5*time.Minute, timeoutHelp)
	var strictRepl *bool
	if sub == "check" {
		strictRepl = fs.Bool("strict-replication", false, "fail (exit 1) when the replication verdict is lossy or unknown, not just warn")
	}
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	dsn, err := dsnFlags.required()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch sub {
	case "migrate":
		return dbMigrate(ctx, dsn, stdout)
	case "version":
		return dbVersion(ctx, dsn, stdout)
	case "unbind":
		return dbUnbind(ctx, dsn, stdout)
	default:
		return dbCheck(ctx, dsn, *strictRepl, stdout)
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
		return fmt.Errorf("schema is behind: run `idctl db migrate`")
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
