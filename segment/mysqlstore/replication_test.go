package mysqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// mariaFacts is a standalone MariaDB 10.11 as a privileged user sees it;
// edit changes it.
func mariaFacts(edit func(f *replicationFacts)) replicationFacts {
	f := replicationFacts{
		MariaDB: true, Version: "10.11.6-MariaDB-log", User: "idgen@10.%",
		Vars: map[string]string{"log_bin": "ON", "wsrep_on": "OFF",
			"rpl_semi_sync_master_enabled": "OFF", "rpl_semi_sync_master_wait_point": "AFTER_COMMIT",
			"rpl_semi_sync_master_timeout": "10000", "rpl_semi_sync_master_wait_no_slave": "ON"},
		Status: map[string]string{"rpl_semi_sync_master_status": "OFF", "rpl_semi_sync_master_clients": "0",
			"slaves_connected": "0", "slaves_running": "0"},
		DumpsKnown: true, ReplicaKnown: true,
	}
	if edit != nil {
		edit(&f)
	}
	return f
}

// mysqlFacts is a MySQL 8.0.36 primary without the semi-sync plugin.
func mysqlFacts(edit func(f *replicationFacts)) replicationFacts {
	f := replicationFacts{
		Version: "8.0.36", User: "idgen@%",
		Vars:       map[string]string{"log_bin": "ON"},
		Status:     map[string]string{},
		DumpsKnown: true, ReplicaKnown: true,
	}
	if edit != nil {
		edit(&f)
	}
	return f
}

func afterSync(f *replicationFacts) {
	f.Vars["rpl_semi_sync_master_enabled"] = "ON"
	f.Vars["rpl_semi_sync_master_wait_point"] = "AFTER_SYNC"
	f.Status["rpl_semi_sync_master_status"] = "ON"
	f.Status["rpl_semi_sync_master_clients"] = "2"
	f.Dumps = 2
}

// TestReplicationVerdicts covers every verdict (and the ways to reach
// each) from injected server facts.
func TestReplicationVerdicts(t *testing.T) {
	for _, c := range []struct {
		name string
		f    replicationFacts
		want Verdict
		has  []string // in String()
		not  []string // not in String()
	}{
		{"galera", mariaFacts(func(f *replicationFacts) {
			f.Vars["wsrep_on"] = "ON"
			f.Status["wsrep_cluster_size"] = "3"
			f.Status["wsrep_cluster_status"] = "Primary"
			f.Status["wsrep_local_state_comment"] = "Synced"
			f.Dumps = 1 // an async replica of a member does not change it
		}), VerdictGalera, []string{"galera (wsrep_on=ON, cluster size 3, cluster status Primary, local state Synced): safe"}, []string{"Fix", "not in the primary"}},
		{"galera non-primary component", mariaFacts(func(f *replicationFacts) {
			f.Vars["wsrep_on"] = "ON"
			f.Status["wsrep_cluster_status"] = "non-Primary"
		}), VerdictGalera, []string{"not in the primary component"}, nil},
		{"group replication", mysqlFacts(func(f *replicationFacts) { f.GroupReplication = true }),
			VerdictGroupReplication, []string{"group-replication (", "majority"}, nil},

		{"semisync lossless", mariaFacts(afterSync), VerdictSemisyncLossless,
			[]string{"semisync-lossless (binary log ON, 2 replicas attached, rpl_semi_sync_master_enabled=ON, rpl_semi_sync_master_wait_point=AFTER_SYNC, rpl_semi_sync_master_status=ON, 2 semi-synchronous replicas", "safe"},
			[]string{"LOSSY", "Fix", "asynchronous:"}},
		{"semisync lossless with an async replica too", mariaFacts(func(f *replicationFacts) {
			afterSync(f)
			f.Dumps = 3
		}), VerdictSemisyncLossless, []string{"1 asynchronous: fail over only to a semi-synchronous replica"}, nil},
		{"semisync lossless, MySQL source names", mysqlFacts(func(f *replicationFacts) {
			f.Vars["rpl_semi_sync_source_enabled"] = "ON"
			f.Vars["rpl_semi_sync_source_wait_point"] = "AFTER_SYNC"
			f.Status["rpl_semi_sync_source_status"] = "ON"
			f.Status["rpl_semi_sync_source_clients"] = "1"
			f.Dumps = 1
		}), VerdictSemisyncLossless, []string{"rpl_semi_sync_source_enabled=ON", "1 semi-synchronous replica)"}, nil},
		{"semisync lossless, replica status unreadable (evidence of a primary)", mysqlFacts(func(f *replicationFacts) {
			f.Vars["rpl_semi_sync_source_enabled"] = "ON"
			f.Vars["rpl_semi_sync_source_wait_point"] = "AFTER_SYNC"
			f.Status["rpl_semi_sync_source_status"] = "ON"
			f.Status["rpl_semi_sync_source_clients"] = "1"
			f.DumpsKnown, f.DumpsWhy = false, "no PROCESS"
			f.ReplicaKnown, f.ReplicaWhy = false, "Error 1227"
		}), VerdictSemisyncLossless, []string{"whether this server is itself a replica could not be read (Error 1227)"}, nil},

		{"semisync degraded: status OFF", mariaFacts(func(f *replicationFacts) {
			afterSync(f)
			f.Status["rpl_semi_sync_master_status"] = "OFF"
			f.Status["rpl_semi_sync_master_clients"] = "0"
		}), VerdictSemisyncDegraded, []string{"semisync-degraded (", "rpl_semi_sync_master_status=OFF", "rpl_semi_sync_master_timeout=10000 ms",
			"rpl_semi_sync_master_wait_no_slave=ON", "LOSSY right now", "Fix: ", "rpl_semi_sync_slave_enabled=ON",
			"SET GLOBAL rpl_semi_sync_master_timeout=", "SET GLOBAL rpl_semi_sync_master_wait_no_slave=ON", "README 'Replicated MySQL'"}, nil},
		{"semisync degraded: status ON but no semi-sync replica", mariaFacts(func(f *replicationFacts) {
			afterSync(f)
			f.Status["rpl_semi_sync_master_clients"] = "0"
		}), VerdictSemisyncDegraded, []string{"0 semi-synchronous replicas"}, nil},
		{"semisync degraded, MySQL names", mysqlFacts(func(f *replicationFacts) {
			f.Vars["rpl_semi_sync_source_enabled"] = "ON"
			f.Vars["rpl_semi_sync_source_wait_point"] = "AFTER_SYNC"
			f.Vars["rpl_semi_sync_source_wait_no_replica"] = "OFF"
			f.Status["rpl_semi_sync_source_status"] = "OFF"
			f.Dumps = 1
		}), VerdictSemisyncDegraded, []string{"rpl_semi_sync_source_wait_no_replica=OFF", "SET GLOBAL rpl_semi_sync_source_wait_no_replica=ON", "rpl_semi_sync_replica_enabled=ON"}, []string{"master", "slave"}},
		{"semisync degraded, replicas unknown", mysqlFacts(func(f *replicationFacts) {
			f.Vars["rpl_semi_sync_source_enabled"] = "ON"
			f.Vars["rpl_semi_sync_source_wait_point"] = "AFTER_SYNC"
			f.Status["rpl_semi_sync_source_status"] = "OFF"
			f.DumpsKnown = false
		}), VerdictSemisyncDegraded, nil, nil},

		{"semisync after commit", mariaFacts(func(f *replicationFacts) {
			afterSync(f)
			f.Vars["rpl_semi_sync_master_wait_point"] = "AFTER_COMMIT"
		}), VerdictSemisyncAfterCommit, []string{"semisync-after-commit (", "rpl_semi_sync_master_wait_point=AFTER_COMMIT", "LOSSY", "Fix: SET GLOBAL rpl_semi_sync_master_wait_point=AFTER_SYNC"}, nil},

		{"async, MariaDB", mariaFacts(func(f *replicationFacts) { f.Dumps = 2 }), VerdictAsync,
			[]string{"async (binary log ON, 2 replicas attached, rpl_semi_sync_master_enabled=OFF)", "LOSSY", "Fix: configure semi-synchronous replication with rpl_semi_sync_master_wait_point=AFTER_SYNC, or Galera",
				"ZooKeeper guard keeps UNORDERED and snowflake fallback unique", "README 'Replicated MySQL'"}, []string{"INSTALL PLUGIN"}},
		{"async, MySQL 8.0.36 without the plugin", mysqlFacts(func(f *replicationFacts) { f.Dumps = 1 }), VerdictAsync,
			[]string{"1 replica attached", "semi-synchronous replication not loaded", "INSTALL PLUGIN rpl_semi_sync_source", "rpl_semi_sync_source_wait_point=AFTER_SYNC", "rpl_semi_sync_replica_enabled=ON"}, nil},
		{"async, MySQL 8.0.20 without the plugin", mysqlFacts(func(f *replicationFacts) { f.Version = "8.0.20-log"; f.Dumps = 1 }), VerdictAsync,
			[]string{"INSTALL PLUGIN rpl_semi_sync_master", "rpl_semi_sync_master_wait_point=AFTER_SYNC"}, nil},
		{"async with dumps seen but no PROCESS proof", mysqlFacts(func(f *replicationFacts) { f.Dumps = 1; f.DumpsKnown = true; f.ReplicaKnown = false }), VerdictAsync, nil, nil},

		{"replica", mariaFacts(func(f *replicationFacts) {
			f.Sources = []string{`db1:3306 [I/O thread Yes, SQL thread Yes]`}
			f.Dumps = 1
		}), VerdictReplica, []string{"replica (this server replicates from db1:3306 [I/O thread Yes, SQL thread Yes])", "UNSAFE", "Fix: point idgen's --mysql DSN at the primary"}, nil},
		{"replica from Slaves_running", mariaFacts(func(f *replicationFacts) {
			f.Vars["log_bin"] = "OFF"
			f.Sources = []string{"1 running replication connection (Slaves_running; SHOW ALL SLAVES STATUS says which)"}
		}), VerdictReplica, []string{"Slaves_running"}, nil},

		{"no replica: binary log off", mariaFacts(func(f *replicationFacts) { f.Vars["log_bin"] = "OFF"; f.DumpsKnown = false }), VerdictNoReplica,
			[]string{"no-replica (binary log OFF, so nothing replicates from this server, not a replica): safe", "A replica added later makes failovers lossy unless it is semi-synchronous with wait point AFTER_SYNC"}, []string{"LOSSY", "Fix"}},
		{"no replica: binary log on, none attached, none seen", mariaFacts(nil), VerdictNoReplica, []string{"binary log ON, 0 replicas attached", "semi-synchronous", "no replica seen since this node started"}, nil},
		{"no replica: binary log off, replicas seen before", mariaFacts(func(f *replicationFacts) { f.Vars["log_bin"] = "OFF"; f.SeenDumps = 2 }), VerdictNoReplica, []string{"binary log OFF"}, nil},
		// Issue 29 hole f: semi-synchronous replication enabled is a
		// configured replica; none connected right now is one reconnecting
		// (the lagging replica a failover promotes), not "no replica".
		{"semi-sync AFTER_SYNC on, nothing attached (fallen back)", mariaFacts(func(f *replicationFacts) {
			afterSync(f)
			f.Dumps = 0
			f.Status["rpl_semi_sync_master_status"] = "OFF"
			f.Status["rpl_semi_sync_master_clients"] = "0"
		}), VerdictSemisyncDegraded, []string{"no replica is connected now", "LOSSY"}, nil},
		{"semi-sync AFTER_SYNC on, status ON, 0 clients (MySQL 8 wait_no_replica)", mysqlFacts(func(f *replicationFacts) {
			f.Vars["rpl_semi_sync_source_enabled"] = "ON"
			f.Vars["rpl_semi_sync_source_wait_point"] = "AFTER_SYNC"
			f.Vars["rpl_semi_sync_source_wait_no_replica"] = "OFF"
			f.Status["rpl_semi_sync_source_status"] = "ON"
			f.Status["rpl_semi_sync_source_clients"] = "0"
		}), VerdictSemisyncDegraded, []string{"rpl_semi_sync_source_wait_no_replica=OFF", "LOSSY"}, nil},
		{"semi-sync AFTER_COMMIT on, nothing attached", mariaFacts(func(f *replicationFacts) {
			f.Vars["rpl_semi_sync_master_enabled"] = "ON"
		}), VerdictSemisyncAfterCommit, []string{"SET GLOBAL rpl_semi_sync_master_wait_point=AFTER_SYNC"}, nil},
		{"async: none attached now, one seen before (reconnecting)", mariaFacts(func(f *replicationFacts) { f.SeenDumps = 1 }),
			VerdictAsync, []string{"0 replicas attached", "1 replica seen attached earlier", "LOSSY"}, nil},
		{"no replica: MySQL with PROCESS", mysqlFacts(nil), VerdictNoReplica, []string{"semi-synchronous replication not loaded"}, nil},

		{"unknown: no PROCESS, no REPLICATION CLIENT (MySQL)", mysqlFacts(func(f *replicationFacts) {
			f.DumpsKnown, f.DumpsWhy = false, "without the PROCESS privilege information_schema.PROCESSLIST shows only this user's threads"
			f.ReplicaKnown, f.ReplicaWhy = false, "Error 1227 (42000): Access denied"
		}), VerdictUnknown, []string{"unknown (binary log ON, semi-synchronous replication not loaded; could not read whether replicas read the binary log (without the PROCESS privilege",
			"whether this server is itself a replica (Error 1227", "cannot tell", "GRANT PROCESS, REPLICATION CLIENT ON *.* TO 'idgen'@'%';"}, []string{"LOSSY"}},
		{"unknown: binary log off but replica status unreadable", mysqlFacts(func(f *replicationFacts) {
			f.Vars["log_bin"] = "OFF"
			f.ReplicaKnown, f.ReplicaWhy = false, "Error 1227"
		}), VerdictUnknown, []string{"binary log OFF", "GRANT REPLICATION CLIENT ON *.* TO 'idgen'@'%'"}, []string{"PROCESS"}},
		{"unknown: MariaDB grant name", mariaFacts(func(f *replicationFacts) {
			f.Vars["log_bin"] = "OFF"
			f.ReplicaKnown, f.ReplicaWhy = false, "Error 1227"
		}), VerdictUnknown, []string{"GRANT SLAVE MONITOR ON *.* TO 'idgen'@'10.%'"}, nil},
		{"unknown: log_bin missing", mariaFacts(func(f *replicationFacts) { delete(f.Vars, "log_bin") }), VerdictUnknown, []string{"could not read @@log_bin"}, nil},
		{"unknown: semi-sync wait point missing", mariaFacts(func(f *replicationFacts) {
			afterSync(f)
			delete(f.Vars, "rpl_semi_sync_master_wait_point")
		}), VerdictUnknown, []string{"could not read @@rpl_semi_sync_master_wait_point"}, nil},
		{"unknown: semi-sync status missing", mariaFacts(func(f *replicationFacts) {
			afterSync(f)
			delete(f.Status, "rpl_semi_sync_master_status")
		}), VerdictUnknown, []string{"could not read status rpl_semi_sync_master_status"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := judgeReplication(c.f)
			if r.Verdict != c.want {
				t.Fatalf("verdict %q, want %q: %s", r.Verdict, c.want, r)
			}
			if r.Lossy() != c.want.Lossy() || r.Safe() != c.want.Safe() || (r.Lossy() && r.Safe()) {
				t.Errorf("Lossy %v, Safe %v for %q", r.Lossy(), r.Safe(), r.Verdict)
			}
			s := r.String()
			if strings.Contains(s, "\n") {
				t.Errorf("String() is not one line: %q", s)
			}
			if !strings.HasPrefix(s, string(c.want)+" (") {
				t.Errorf("String() does not start with the verdict: %q", s)
			}
			for _, w := range c.has {
				if !strings.Contains(s, w) {
					t.Errorf("String() lacks %q:\n%s", w, s)
				}
			}
			for _, w := range c.not {
				if strings.Contains(s, w) {
					t.Errorf("String() has %q:\n%s", w, s)
				}
			}
			if r.Lossy() && !strings.Contains(s, " Fix: ") {
				t.Errorf("lossy verdict without a fix: %s", s)
			}
		})
	}
}

// Every verdict is reached by some case above and is exactly one of safe,
// lossy or unknown.
func TestVerdictClasses(t *testing.T) {
	seen := map[Verdict]bool{}
	for _, v := range Verdicts() {
		if seen[v] {
			t.Errorf("%q listed twice", v)
		}
		seen[v] = true
		n := 0
		for _, b := range []bool{v.Safe(), v.Lossy(), v == VerdictUnknown} {
			if b {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q: Safe %v, Lossy %v", v, v.Safe(), v.Lossy())
		}
		if strings.ToLower(string(v)) != string(v) || strings.ContainsAny(string(v), " _") {
			t.Errorf("%q is not a short kebab-case label", v)
		}
	}
	if len(seen) != 9 {
		t.Errorf("%d verdicts", len(seen))
	}
	var zero Replication
	if zero.Lossy() || zero.Safe() || !strings.HasPrefix(zero.String(), "unknown: ") {
		t.Errorf("zero Replication: %q", zero)
	}
}

func TestDescribeSources(t *testing.T) {
	src, group := describeSources([]map[string]string{
		{"Connection_name": "", "Master_Host": "db1", "Master_Port": "3306", "Slave_IO_Running": "Yes", "Slave_SQL_Running": "No"},
		{"Connection_name": "east", "Master_Host": "db2", "Master_Port": "3307", "Slave_IO_Running": "Connecting", "Slave_SQL_Running": "Yes"},
		{"Channel_Name": "", "Source_Host": "db3", "Source_Port": "3306", "Replica_IO_Running": "Yes", "Replica_SQL_Running": "Yes"},
	})
	want := []string{`db1:3306 [I/O thread Yes, SQL thread No]`, `db2:3307 (connection "east") [I/O thread Connecting, SQL thread Yes]`,
		`db3:3306 [I/O thread Yes, SQL thread Yes]`}
	if group || strings.Join(src, "|") != strings.Join(want, "|") {
		t.Errorf("sources %q, group %v", src, group)
	}
	src, group = describeSources([]map[string]string{
		{"Channel_Name": "group_replication_applier", "Source_Host": "", "Replica_IO_Running": "Yes"},
		{"Channel_Name": "group_replication_recovery", "Source_Host": "", "Replica_IO_Running": "No"},
	})
	if !group || len(src) != 0 {
		t.Errorf("group replication channels: sources %q, group %v", src, group)
	}
}

func TestMySQLAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"8.0.26", true}, {"8.0.36-log", true}, {"8.4.0", true}, {"9.1.0", true},
		{"8.0.25", false}, {"5.7.44-log", false}, {"garbage", false}, {"8", false},
	} {
		if got := mysqlAtLeast(c.v, 8, 0, 26); got != c.want {
			t.Errorf("mysqlAtLeast(%q) = %v", c.v, got)
		}
	}
	if g := grantee("idgen@10.%"); g != "'idgen'@'10.%'" {
		t.Errorf("grantee %s", g)
	}
	if g := grantee("a@b@localhost"); g != "'a@b'@'localhost'" {
		t.Errorf("grantee %s", g)
	}
}

// The test server is a standalone MariaDB: no-replica, as root and as a
// user with no privilege at all (MariaDB's Slaves_connected and
// Slaves_running need none).
func TestIntegration_ReplicationStandalone(t *testing.T) {
	base := testServer(t)
	ctx := testCtx(t)
	root := openRoot(t, base)
	var logBin int
	if err := root.QueryRowContext(ctx, `SELECT @@log_bin`).Scan(&logBin); err != nil {
		t.Fatal(err)
	}
	r, err := ReadReplication(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("root: %s", r)
	if r.Verdict != VerdictNoReplica || !r.Safe() || r.Lossy() {
		t.Fatalf("standalone server: %s", r)
	}
	wantBin := "binary log OFF"
	if logBin == 1 {
		wantBin = "binary log ON, 0 replicas attached"
	}
	if !strings.Contains(r.Detail, wantBin) || !strings.Contains(r.Detail, "not a replica") {
		t.Errorf("detail %q lacks %q / not a replica", r.Detail, wantBin)
	}
	c, err := CheckReplicationDSN(ctx, newTestDatabase(t, base, false))
	if err != nil || c != r {
		t.Fatalf("CheckReplicationDSN = %s, %v; ReadReplication said %s", c, err, r)
	}

	user := newPlainUser(t, root)
	f, err := readReplicationFacts(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	if !f.MariaDB || !f.DumpsKnown || !f.ReplicaKnown || !strings.Contains(f.ReplicaWhy, "1227") {
		t.Errorf("unprivileged facts on MariaDB: %+v", f)
	}
	if r, err := ReadReplication(ctx, user); err != nil || r.Verdict != VerdictNoReplica {
		t.Fatalf("unprivileged user: %s, %v", r, err)
	}
}

// The MySQL path (no Slaves_connected, no Slaves_running) on the real
// server: root proves its PROCESS privilege and reads SHOW REPLICA STATUS;
// a user without privileges gets unknown, naming both GRANTs.
func TestIntegration_ReplicationWithoutMariaDBCounters(t *testing.T) {
	base := testServer(t)
	ctx := testCtx(t)
	root := openRoot(t, base)
	mysqlPath := func(db *sql.DB) replicationFacts {
		f, err := readReplicationFacts(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		f.MariaDB = false
		f.Version = "8.0.36"
		delete(f.Status, "slaves_connected")
		delete(f.Status, "slaves_running")
		f.Dumps, f.DumpsKnown, f.DumpsWhy = 0, false, ""
		f.Sources, f.ReplicaKnown, f.ReplicaWhy = nil, false, ""
		if err := readDumps(ctx, db, &f); err != nil {
			t.Fatal(err)
		}
		if err := readSources(ctx, db, &f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := mysqlPath(root)
	if !f.DumpsKnown || f.Dumps != 0 || !f.ReplicaKnown || len(f.Sources) != 0 {
		t.Fatalf("root, MySQL path: %+v", f)
	}
	if r := judgeReplication(f); r.Verdict != VerdictNoReplica {
		t.Fatalf("root, MySQL path: %s", r)
	}
	f = mysqlPath(newPlainUser(t, root))
	if f.DumpsKnown || f.ReplicaKnown || !strings.Contains(f.DumpsWhy, "PROCESS") || !strings.Contains(f.ReplicaWhy, "1227") {
		t.Fatalf("unprivileged, MySQL path: %+v", f)
	}
	r := judgeReplication(f)
	t.Logf("unprivileged, MySQL path: %s", r)
	if r.Verdict != VerdictUnknown {
		t.Fatalf("unprivileged, MySQL path: %s", r)
	}
	if !strings.Contains(r.String(), "REPLICATION CLIENT ON *.* TO '"+f.User[:strings.LastIndexByte(f.User, '@')]+"'@'%'") {
		t.Errorf("no GRANT hint: %s", r)
	}
}

// newPlainUser creates a user with no privilege (dropped at cleanup) and
// returns a connection pool logged in as it, without a database.
func newPlainUser(t *testing.T, root *sql.DB) *sql.DB {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "idgen_repl_" + hex.EncodeToString(b[:])
	who := "'" + name + "'@'%'"
	ctx := testCtx(t)
	if _, err := root.ExecContext(ctx, "CREATE USER "+who+" IDENTIFIED BY 'pw-"+name+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = root.ExecContext(context.Background(), "DROP USER "+who) })
	mc, err := mysql.ParseDSN(testServer(t))
	if err != nil {
		t.Fatal(err)
	}
	mc.User, mc.Passwd, mc.DBName = name, "pw-"+name, ""
	db, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestReplicaHistory (issue 29 hole f): a replica seen attached once keeps
// the verdict lossy while it reconnects (0 attached at the next read); a
// node that never saw one judges the same facts no-replica.
func TestReplicaHistory(t *testing.T) {
	var h ReplicaHistory
	if r := h.judge(mariaFacts(nil)); r.Verdict != VerdictNoReplica {
		t.Fatalf("nothing seen yet: %s", r)
	}
	if r := h.judge(mariaFacts(func(f *replicationFacts) { f.Dumps = 1 })); r.Verdict != VerdictAsync {
		t.Fatalf("one attached: %s", r)
	}
	r := h.judge(mariaFacts(nil)) // the replica reconnects
	if r.Verdict != VerdictAsync || r.Safe() {
		t.Fatalf("replica reconnecting: %s; want async (lossy)", r)
	}
	// Semi-synchronous clients count as seen too.
	var h2 ReplicaHistory
	h2.judge(mariaFacts(func(f *replicationFacts) { afterSync(f) }))
	if h2.Seen() != 2 {
		t.Fatalf("seen %d after 2 semi-synchronous clients", h2.Seen())
	}
}
