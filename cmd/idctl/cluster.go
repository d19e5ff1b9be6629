package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/internal/idctlenv"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/worker"
	"github.com/idgen/idgen/worker/mysqllease"
)

// clusterSynopsis is the usage line of each cluster subcommand.
var clusterSynopsis = map[string]string{
	"init":    "idctl cluster init    --zk HOSTS [--cluster NAME] [--zk-root /idgen] [--zk-auth-file F] [--epoch RFC3339] [--idc-bits 2 --node-bits 8] [--exists-ok]",
	"show":    "idctl cluster show    --zk HOSTS [--cluster NAME] [--zk-root /idgen] [--zk-auth-file F] [--json]",
	"restore": "idctl cluster restore --zk HOSTS [--cluster NAME] [--zk-root /idgen] [--zk-auth-file F] [--from-properties FILE]",
	"migrate": "idctl cluster migrate --zk HOSTS --mysql-file F [--cluster NAME] [--zk-root /idgen] [--zk-auth-file F] --to zookeeper|mysql",
}

// clusterAbout is the text of each cluster subcommand's help.
var clusterAbout = map[string]string{
	"init": `A cluster is created once, with init, before its first node starts: a node
never creates one (it could not tell a new cluster from one whose ZooKeeper
lost its data). The first nodes of a cluster created so serve at once. Give
the nodes' --zk-auth-file (or --zk-auth) so that the cluster's znodes are
created with a digest ACL; without it they are open to every ZooKeeper client.
`,
	"show": `Prints the cluster's record in ZooKeeper: epoch and bits, registry, restores
and the incarnation marker.
`,
	"restore": `restore is the operator's fix after ZooKeeper lost data (wiped, or restored
from an older copy): it marks the cluster restored now, so every slot taken
in the next lead waits past the marks ZooKeeper may have lost; with no
record left, it re-creates it from a member's properties file. Nodes that
ran before a loss do this by themselves when they see it.
`,
	"migrate": `migrate moves a stopped cluster's worker slots between MySQL (--mysql alone)
and ZooKeeper (--zk --mysql), raising the target's marks above the source's.
It first records "migrating" in MySQL and in the cluster's ZooKeeper record,
then the target: a ZooKeeper node it cannot see (its session expired) is
refused at its next claim and stops issuing SNOWFLAKE IDs until restarted.
`,
}

var clusterSubs = []string{"init", "show", "restore", "migrate"}

// clusterUsage is the help of idctl cluster: every synopsis, then every
// subcommand's text.
func clusterUsage() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, sub := range clusterSubs {
		fmt.Fprintf(&b, "  %s\n", clusterSynopsis[sub])
	}
	for _, sub := range clusterSubs {
		fmt.Fprintf(&b, "\n%s", clusterAbout[sub])
	}
	b.WriteString("\nEvery subcommand takes the digest credential of an ACL-protected cluster as\n" +
		"--zk-auth-file or --zk-auth (env IDGEN_ZK_AUTH_FILE, IDGEN_ZK_AUTH), and --timeout.\n" +
		"Run 'idctl cluster SUBCOMMAND --help' for the flags of one.\n")
	return b.String()
}

// cmdCluster manages a cluster's record in ZooKeeper (package cluster).
func cmdCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageHint{usageError{errors.New("cluster: missing subcommand: want init, show, restore or migrate")}, "\n" + clusterUsage()}
	}
	sub, args := args[0], args[1:]
	if isHelpArg(sub) || sub == "help" {
		return &helpRequest{func(w io.Writer) { fmt.Fprint(w, clusterUsage()) }}
	}
	if _, known := clusterSynopsis[sub]; !known {
		return &usageHint{usageError{fmt.Errorf("cluster: unknown subcommand %q: want init, show, restore or migrate", sub)}, "\n" + clusterUsage()}
	}
	fs := newCmdFlags("cluster "+sub, strings.Join(strings.Fields(clusterSynopsis[sub]), " "), clusterAbout[sub], stderr)
	servers, name, root, authFlags := addZKFlags(fs)
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for ZooKeeper")
	var (
		epoch                 *string
		idcBits, nodeBits     *int
		existsOK, asJSON      *bool
		fromProps, to, leadFl *string
		mysqlFlags            *secretFlags
	)
	switch sub {
	case "init":
		epoch = fs.String("epoch", envOr(idctlenv.Epoch, "2020-01-01T00:00:00Z"), "snowflake epoch, RFC 3339 (env "+idctlenv.Epoch+")")
		idcBits = fs.Int("idc-bits", worker.DefaultIDCBits, "worker bits for the IDC (idc-bits + node-bits = 10)")
		nodeBits = fs.Int("node-bits", worker.DefaultNodeBits, "worker bits for the node")
		existsOK = fs.Bool("exists-ok", false, "exit 0 when the cluster exists with the same settings")
	case "show":
		asJSON = fs.Bool("json", false, "print the record as JSON")
	case "restore":
		fromProps = fs.String("from-properties", "", "a member's <app>:<port>:<ip>.properties, to re-create a lost record from")
	case "migrate":
		mysqlFlags = addMySQLFlags(fs)
		to = fs.String("to", "", "zookeeper or mysql: where the slots are held afterwards")
		leadFl = fs.String("lead", "", "the nodes' lead, heartbeat + outage tolerance + margin + clock skew (default: the defaults')")
	}
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	if strings.TrimSpace(*servers) == "" {
		return fs.usageErr("--zk is required (or set IDGEN_ZK)")
	}
	// Every flag is checked before ZooKeeper is dialled: a mistake is a
	// usage error at once, not a timeout.
	var (
		settings cluster.Settings
		dsn      string
		err      error
	)
	lead := worker.Config{}.Lead() + worker.DefaultMaxPeerClockSkew
	switch sub {
	case "init":
		ep, err := time.Parse(time.RFC3339, *epoch)
		if err != nil {
			return fs.usageErr("--epoch %q: want RFC 3339 such as 2020-01-01T00:00:00Z", *epoch)
		}
		if *idcBits < 0 || *nodeBits < 0 || *idcBits+*nodeBits != worker.WorkerBits {
			return fs.usageErr("--idc-bits %d + --node-bits %d: must add up to %d", *idcBits, *nodeBits, worker.WorkerBits)
		}
		settings = cluster.Settings{EpochMs: ep.UnixMilli(), IDCBits: *idcBits, NodeBits: *nodeBits}
	case "migrate":
		if dsn, err = mysqlFlags.required(); err != nil {
			return err
		}
		if *to != mysqllease.RegistryMySQL && *to != mysqllease.RegistryZooKeeper {
			return fs.usageErr("--to %q: want zookeeper or mysql", *to)
		}
		if *leadFl != "" {
			d, err := time.ParseDuration(*leadFl)
			if err != nil || d <= 0 {
				return fs.usageErr("--lead %q: want a positive duration such as 36s", *leadFl)
			}
			lead = d
		}
	}
	auth, err := authFlags.get()
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	conn, err := worker.DialZK(dctx, strings.Split(*servers, ","), worker.DefaultSessionTimeout, auth, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	acl := worker.ClusterACL(auth)
	switch sub {
	case "init":
		s := settings
		rec, err := cluster.Init(conn, *root, *name, s, acl)
		if errors.Is(err, cluster.ErrExists) && *existsOK {
			if rec.EpochMs != s.EpochMs || rec.IDCBits != s.IDCBits || rec.NodeBits != s.NodeBits {
				return fmt.Errorf("cluster %q exists with other settings (epoch %s, idc_bits %d, node_bits %d)", *name, rec.Epoch, rec.IDCBits, rec.NodeBits)
			}
			// A cluster from before incarnation markers gets one (its
			// nodes would create it at their next connect anyway).
			m, merr := incarnation.Create(conn, *root, *name, acl, time.Now())
			if merr != nil && !errors.Is(merr, zk.ErrNodeExists) {
				return merr
			}
			fmt.Fprintf(stdout, "cluster %s exists (created %s, incarnation %s)\n", *name, rec.Created, m.ID)
			return nil
		}
		if err != nil {
			return err
		}
		// The incarnation marker: every node records its ID and compares it
		// at every (re)connect, so a re-created cluster is refused and a
		// wiped or restored ZooKeeper is detected (package cluster/incarnation).
		m, err := incarnation.Create(conn, *root, *name, acl, time.Now())
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		fmt.Fprintf(stdout, "cluster %s created at %s: epoch %s, idc_bits %d, node_bits %d, incarnation %s\n", *name, cluster.MetaPath(*root, *name), rec.Epoch, rec.IDCBits, rec.NodeBits, m.ID)
		if auth == "" {
			fmt.Fprintln(stderr, "idctl: note: no ZooKeeper credential given, so the cluster's znodes are open to every ZooKeeper client; give the nodes' --zk-auth-file (or IDGEN_ZK_AUTH_FILE) to create them with a digest ACL")
		}
		return nil
	case "show":
		rec, st, err := cluster.Read(conn, *root, *name)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(rec)
		}
		fmt.Fprintf(stdout, "cluster %s (%s)\n  created   %s\n  epoch     %s\n  bits      idc %d, node %d\n  registry  %s\n  init      %v\n  zk epoch  %d (seen %s)\n",
			*name, cluster.MetaPath(*root, *name), rec.Created, rec.Epoch, rec.IDCBits, rec.NodeBits, rec.Registry, rec.Init,
			rec.ZKEpoch, msOrNever(rec.ZKEpochSeenMs))
		if rec.Restores > 0 {
			fmt.Fprintf(stdout, "  restored  %d time(s), last %s: %s\n", rec.Restores, rec.Restored, rec.RestoreReason)
		}
		fmt.Fprintf(stdout, "  record    version %d, written %s\n", st.Version, time.UnixMilli(st.Mtime).UTC().Format(time.RFC3339))
		switch m, _, err := incarnation.ReadMarker(conn, *root, *name); {
		case err == nil:
			fmt.Fprintf(stdout, "  incarnation %s (created %s), counter %d, losses detected %d\n", m.ID, m.Created, m.Counter, m.Restores)
			if m.Restores > 0 {
				fmt.Fprintf(stdout, "  last loss %s: %s\n", m.Restored, m.RestoreReason)
			}
		case errors.Is(err, zk.ErrNoNode):
			fmt.Fprintln(stdout, "  incarnation none (a cluster from before markers: its first node to connect creates one)")
		default:
			return err
		}
		return nil
	case "restore":
		return clusterRestore(conn, *root, *name, *fromProps, acl, stdout)
	default:
		return clusterMigrate(ctx, conn, *root, *name, dsn, *to, lead, auth, stdout)
	}
}

func msOrNever(ms int64) string {
	if ms == 0 {
		return "at creation"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// clusterRestore marks the cluster restored now or, with no record left,
// re-creates it from a member's properties file.
func clusterRestore(conn *zk.Conn, root, name, fromProps string, acl []zk.ACL, stdout io.Writer) error {
	_, _, rerr := cluster.Read(conn, root, name)
	if errors.Is(rerr, cluster.ErrNotFound) && fromProps == "" {
		// Refused before any write: no empty cluster znode left behind.
		return fmt.Errorf("cluster %q has no record in ZooKeeper: give --from-properties with a member's properties file (in its --properties-dir), so that created_ms and the settings are the cluster's", name)
	}
	now, err := cluster.Now(conn, root, name, acl)
	if errors.Is(err, zk.ErrNoNode) {
		if err := cluster.EnsurePath(conn, cluster.Path(root, name), acl); err != nil {
			return err
		}
		now, err = cluster.Now(conn, root, name, acl)
	}
	if err != nil {
		return err
	}
	reason := "idctl cluster restore: the operator reported that ZooKeeper lost data"
	if errors.Is(rerr, cluster.ErrNotFound) {
		m, err := worker.PropertiesMeta(fromProps, name)
		if err != nil {
			return err
		}
		inc, err := worker.PropertiesIncarnation(fromProps, name)
		if err != nil {
			return err
		}
		rec, err := cluster.Restore(conn, root, name, cluster.Record{EpochMs: m.EpochMs, IDCBits: m.IDCBits, NodeBits: m.NodeBits, CreatedMs: m.CreatedMs}, now, reason, acl)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "cluster %s re-created from %s (created %s) and marked restored at %s\n", name, fromProps, rec.Created, rec.Restored)
		// The incarnation marker with the ID the nodes recorded: a node
		// without a record connecting first would otherwise create a new
		// one, and the nodes that ran before would be refused.
		if inc.ID != "" {
			mk, err := incarnation.Recreate(conn, root, name, inc, acl)
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
			fmt.Fprintf(stdout, "incarnation %s\n", mk.ID)
		}
		return nil
	}
	if rerr != nil {
		return rerr
	}
	rec, err := cluster.MarkRestored(conn, root, name, now, reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster %s marked restored at %s: slots taken in the next lead wait past it\n", name, rec.Restored)
	return nil
}

// clusterMigrate moves a stopped cluster's slots between the registries.
func clusterMigrate(ctx context.Context, conn *zk.Conn, root, name, dsn, to string, lead time.Duration, auth string, stdout io.Writer) error {
	cur, latest, err := mysqlstore.SchemaVersion(ctx, dsn)
	if err != nil {
		return err
	}
	if cur < latest {
		return fmt.Errorf("the MySQL schema is at version %d, this idctl needs %d: run `idctl db migrate` first", cur, latest)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("--mysql: %w", err)
	}
	defer db.Close()
	log := zap.NewNop()
	if err := mysqllease.Migrate(ctx, mysqllease.MigrateConfig{DB: db, Cluster: name, To: to, Logger: log,
		ZooKeeper: worker.ZKRegistry{Conn: conn, Root: root, Cluster: name, Auth: auth, Lead: lead}}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster %s: worker slots are held in %s now; start its nodes %s\n", name, to,
		map[string]string{mysqllease.RegistryMySQL: "with --mysql and without --zk", mysqllease.RegistryZooKeeper: "with --zk and --mysql"}[to])
	return nil
}
