package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/internal/mysqlerr"
)

// Verdict is what the replication setup of the server a Store talks to
// guarantees about reservations surviving a failover. The values are
// short and stable: they are the label of idgen_mysql_replication_verdict.
type Verdict string

// Verdicts. Safe: galera, group-replication, semisync-lossless,
// no-replica. Lossy: semisync-degraded, semisync-after-commit, async,
// replica. Unknown: some fact could not be read.
const (
	// VerdictGalera: wsrep_on=ON. A commit returns after every member
	// certified its write set, so a failover to another member loses
	// nothing acknowledged.
	VerdictGalera Verdict = "galera"
	// VerdictGroupReplication: a MySQL Group Replication member (InnoDB
	// Cluster). A commit returns after a majority of the group certified
	// it.
	VerdictGroupReplication Verdict = "group-replication"
	// VerdictSemisyncLossless: semi-synchronous replication with wait
	// point AFTER_SYNC, active: a commit returns (and becomes visible)
	// only after a replica has it.
	VerdictSemisyncLossless Verdict = "semisync-lossless"
	// VerdictSemisyncDegraded: semi-sync configured with AFTER_SYNC, but
	// the primary has fallen back to asynchronous replication (the
	// replicas stopped acknowledging, or none is semi-synchronous).
	VerdictSemisyncDegraded Verdict = "semisync-degraded"
	// VerdictSemisyncAfterCommit: semi-sync with wait point AFTER_COMMIT:
	// the primary commits, and other sessions see the commit, before a
	// replica has it.
	VerdictSemisyncAfterCommit Verdict = "semisync-after-commit"
	// VerdictAsync: replicas read this server's binary log and nothing
	// waits for them.
	VerdictAsync Verdict = "async"
	// VerdictReplica: this server is itself a replica; idgen must write to
	// the primary.
	VerdictReplica Verdict = "replica"
	// VerdictNoReplica: no replication: nothing to fail over to.
	VerdictNoReplica Verdict = "no-replica"
	// VerdictUnknown: a variable or privilege was missing; Replication's
	// Detail says what, its Fix which GRANT helps.
	VerdictUnknown Verdict = "unknown"
)

// Verdicts returns every verdict, safe ones first (the label values of
// idgen_mysql_replication_verdict).
func Verdicts() []Verdict {
	return []Verdict{VerdictGalera, VerdictGroupReplication, VerdictSemisyncLossless, VerdictNoReplica,
		VerdictSemisyncDegraded, VerdictSemisyncAfterCommit, VerdictAsync, VerdictReplica, VerdictUnknown}
}

// Lossy reports whether the verdict says a failover (or, for a replica,
// the next change of roles) can lose reservations the server acknowledged.
func (v Verdict) Lossy() bool {
	switch v {
	case VerdictSemisyncDegraded, VerdictSemisyncAfterCommit, VerdictAsync, VerdictReplica:
		return true
	}
	return false
}

// Safe reports whether the verdict says no failover loses an acknowledged
// reservation. Unknown is neither Safe nor Lossy.
func (v Verdict) Safe() bool {
	switch v {
	case VerdictGalera, VerdictGroupReplication, VerdictSemisyncLossless, VerdictNoReplica:
		return true
	}
	return false
}

// Replication is the replication setup as read from the server and its
// verdict. ReadReplication fills it; Store.Open logs it.
type Replication struct {
	Verdict Verdict
	// Detail is what was read, e.g. "binary log ON, 2 replicas attached,
	// semi-synchronous replication not enabled".
	Detail string
	// Fix is what to do: for a lossy verdict how to make failovers
	// lossless, for unknown which GRANT lets idgen read the setup; empty
	// when Safe (no-replica may carry advice for later).
	Fix string
}

// Lossy reports whether a failover can lose committed reservations (the
// verdict is semisync-degraded, semisync-after-commit, async or replica).
func (r Replication) Lossy() bool { return r.Verdict.Lossy() }

// Safe reports whether no failover can lose a committed reservation.
func (r Replication) Safe() bool { return r.Verdict.Safe() }

// String is the one-line verdict: the verdict, what was found, what it
// guarantees and, unless safe, the fix. For example
//
//	async (binary log ON, 1 replica attached, ...): LOSSY: ... Fix: ...
func (r Replication) String() string {
	v := r.Verdict
	if v == "" {
		v = VerdictUnknown
	}
	s := string(v)
	if r.Detail != "" {
		s += " (" + r.Detail + ")"
	}
	s += ": " + guarantee(v)
	if r.Fix != "" {
		if v.Lossy() {
			s += " Fix: " + r.Fix
		} else {
			s += " " + r.Fix
		}
	}
	return s
}

// guarantee is what a verdict means for idgen's reservations.
func guarantee(v Verdict) string {
	switch v {
	case VerdictGalera:
		return "safe: a commit returns only after every member of the cluster certified it, so a failover to another member loses no reservation."
	case VerdictGroupReplication:
		return "safe: a commit returns only after a majority of the group certified it, so a failover to another member loses no reservation."
	case VerdictSemisyncLossless:
		return "safe: a commit returns, and becomes visible, only after a replica has it (AFTER_SYNC), so a failover to a semi-synchronous replica loses no reservation."
	case VerdictNoReplica:
		return "safe: no replica, so no failover can lose a reservation."
	case VerdictSemisyncDegraded:
		return "LOSSY right now: the primary acknowledges commits without any replica having them, so a failover can lose reservations idgen already handed out, and hand those numbers out again."
	case VerdictSemisyncAfterCommit:
		return "LOSSY: with AFTER_COMMIT the primary commits, and other sessions see a reservation (a request-id replay, another node's read), before any replica has it, so a failover can lose numbers already handed out."
	case VerdictAsync:
		return "LOSSY: the primary acknowledges commits before any replica has them, so a failover can lose reservations idgen already handed out, and hand those numbers out again."
	case VerdictReplica:
		return "UNSAFE: this server is a replica; what idgen writes here is not replicated to its source, and the source's changes to the same rows overwrite idgen's reservations."
	}
	return "cannot tell whether a failover can lose reservations."
}

// meanwhile is what protects idgen while replication is lossy.
const meanwhile = "Until then idgen's ZooKeeper guard keeps UNORDERED and snowflake fallback unique across a lossy failover, and ORDERED keys still remembered by a node (see README 'Replicated MySQL')."

// replicationFacts is what ReadReplication gathers from the server;
// judgeReplication turns it into a verdict. Names in Vars and Status are
// lower case; a name that is absent was not there (a semi-sync plugin not
// loaded, a server without Galera).
type replicationFacts struct {
	MariaDB bool
	Version string // @@version
	User    string // CURRENT_USER(), user@host, for the GRANT hint
	Vars    map[string]string
	Status  map[string]string

	// Dumps is the number of replicas reading the binary log (binlog dump
	// threads, or MariaDB's Slaves_connected) when DumpsKnown; DumpsWhy
	// says why not (a missing PROCESS privilege).
	Dumps      int
	DumpsKnown bool
	DumpsWhy   string

	// Sources are this server's own replication sources (rows of SHOW
	// REPLICA STATUS), when ReplicaKnown; ReplicaWhy says why not.
	Sources      []string
	ReplicaKnown bool
	ReplicaWhy   string
	// GroupReplication: a group_replication_applier channel was seen (a
	// MySQL Group Replication member); its channels are not in Sources.
	GroupReplication bool

	// SeenDumps is the most replicas a ReplicaHistory saw reading this
	// cluster's binary log before (0: none seen, or no history kept).
	// "No replica connected right now" is not "no replica": an
	// asynchronous replica that is reconnecting is exactly the lagging
	// one a failover promotes.
	SeenDumps int
}

// semisync returns the prefix of the semi-sync variables in use
// ("rpl_semi_sync_source_" or "rpl_semi_sync_master_") and whether the
// plugin's variables are there at all. Without them it returns the names
// an operator would install: MariaDB and MySQL before 8.0.26 "master",
// later MySQL "source".
func (f replicationFacts) semisync() (prefix string, loaded bool) {
	if _, ok := f.Vars["rpl_semi_sync_source_enabled"]; ok {
		return "rpl_semi_sync_source_", true
	}
	if _, ok := f.Vars["rpl_semi_sync_master_enabled"]; ok {
		return "rpl_semi_sync_master_", true
	}
	if !f.MariaDB && mysqlAtLeast(f.Version, 8, 0, 26) {
		return "rpl_semi_sync_source_", false
	}
	return "rpl_semi_sync_master_", false
}

// mysqlAtLeast reports whether a version string such as "8.0.36-log" is
// at least maj.min.patch (false when it does not parse).
func mysqlAtLeast(version string, maj, min, patch int) bool {
	num, _, _ := strings.Cut(version, "-")
	parts := strings.SplitN(num, ".", 3)
	var v [3]int
	for i := range parts {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return false
		}
		v[i] = n
	}
	for i, w := range [3]int{maj, min, patch} {
		if v[i] != w {
			return v[i] > w
		}
	}
	return true
}

// semisyncFix is how to turn on lossless semi-synchronous replication
// with the variable names of the server.
func (f replicationFacts) semisyncFix() string {
	prefix, loaded := f.semisync()
	replica := "rpl_semi_sync_slave_enabled=ON"
	install := ""
	if prefix == "rpl_semi_sync_source_" {
		replica = "rpl_semi_sync_replica_enabled=ON"
		if !loaded {
			install = "INSTALL PLUGIN rpl_semi_sync_source SONAME 'semisync_source.so' (replicas: rpl_semi_sync_replica, 'semisync_replica.so'); "
		}
	} else if !loaded && !f.MariaDB {
		install = "INSTALL PLUGIN rpl_semi_sync_master SONAME 'semisync_master.so' (replicas: rpl_semi_sync_slave, 'semisync_slave.so'); "
	}
	return fmt.Sprintf("configure semi-synchronous replication with %swait_point=AFTER_SYNC, or Galera: %sSET GLOBAL %senabled=ON; SET GLOBAL %swait_point=AFTER_SYNC; on each replica SET GLOBAL %s and restart its replication I/O thread; the same in my.cnf. %s",
		prefix, install, prefix, prefix, replica, meanwhile)
}

func isOn(s string) bool {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "ON", "1", "YES", "TRUE":
		return true
	}
	return false
}

// grantee quotes a CURRENT_USER() value (user@host) for a GRANT.
func grantee(user string) string {
	if user == "" {
		return "the idgen user"
	}
	i := strings.LastIndexByte(user, '@')
	if i < 0 {
		return "'" + user + "'"
	}
	return "'" + user[:i] + "'@'" + user[i+1:] + "'"
}

// judgeReplication is the verdict on f. Safe verdicts need the facts
// that could overturn them: no-replica needs the replica count (or the
// binary log off) and the knowledge that this server is not itself a
// replica; anything short of that is unknown, naming what is missing.
func judgeReplication(f replicationFacts) Replication {
	var found []string
	add := func(format string, a ...any) { found = append(found, fmt.Sprintf(format, a...)) }
	detail := func() string { return strings.Join(found, ", ") }

	if isOn(f.Vars["wsrep_on"]) {
		add("wsrep_on=ON")
		if n, ok := f.Status["wsrep_cluster_size"]; ok {
			add("cluster size %s", n)
		}
		if st, ok := f.Status["wsrep_cluster_status"]; ok {
			add("cluster status %s", st)
			if !strings.EqualFold(st, "Primary") {
				add("this member is not in the primary component and refuses writes until it rejoins")
			}
		}
		if st, ok := f.Status["wsrep_local_state_comment"]; ok {
			add("local state %s", st)
		}
		return Replication{Verdict: VerdictGalera, Detail: detail()}
	}
	if f.GroupReplication {
		add("a MySQL Group Replication member (channel group_replication_applier)")
		return Replication{Verdict: VerdictGroupReplication, Detail: detail()}
	}
	if f.ReplicaKnown && len(f.Sources) > 0 {
		add("this server replicates from %s", strings.Join(f.Sources, "; "))
		return Replication{Verdict: VerdictReplica, Detail: detail(),
			Fix: "point idgen's --mysql DSN at the primary (the server every replica reads from), never at a replica; if this is one side of a master-master pair, replication between them is still asynchronous: " + f.semisyncFix()}
	}

	logBin, logBinKnown := f.Vars["log_bin"]
	var missing []string // what could not be read
	var grants []string  // what would let it be read
	if !logBinKnown {
		missing = append(missing, "@@log_bin")
	}
	replicaUnknown := func() {
		if !f.ReplicaKnown {
			missing = append(missing, "whether this server is itself a replica ("+f.ReplicaWhy+")")
			if f.MariaDB {
				grants = append(grants, "SLAVE MONITOR")
			} else {
				grants = append(grants, "REPLICATION CLIENT")
			}
		}
	}
	noReplica := func(note string) Replication {
		replicaUnknown()
		if len(missing) > 0 {
			return unknownReplication(f, found, missing, grants)
		}
		add("not a replica")
		if note != "" {
			add("%s", note)
		}
		return Replication{Verdict: VerdictNoReplica, Detail: detail(),
			Fix: "A replica added later makes failovers lossy unless it is semi-synchronous with wait point AFTER_SYNC (or the cluster is Galera)."}
	}

	if logBinKnown && !isOn(logBin) {
		add("binary log OFF, so nothing replicates from this server")
		return noReplica("")
	}
	if logBinKnown {
		add("binary log ON")
	}
	if f.DumpsKnown {
		add("%d %s attached", f.Dumps, plural(f.Dumps, "replica", "replicas"))
	}
	// legacy reopens issue 29 hole f (fault injection's negative control):
	// "0 replicas connected right now" reads as no replica at all.
	legacy := faultNoReplicaNowIsNone()
	// seenBefore: no replica is attached now, but this node saw one: it
	// is reconnecting (or was removed: only a restart forgets it).
	seenBefore := !legacy && f.DumpsKnown && f.Dumps == 0 && f.SeenDumps > 0
	if seenBefore {
		add("%d %s seen attached earlier (a replica that is reconnecting is still the one a failover promotes)", f.SeenDumps, plural(f.SeenDumps, "replica", "replicas"))
	}

	prefix, loaded := f.semisync()
	enabled := loaded && isOn(f.Vars[prefix+"enabled"])
	statusPrefix := "rpl_semi_sync_master_"
	if prefix == "rpl_semi_sync_source_" {
		statusPrefix = "rpl_semi_sync_source_"
	}
	if !enabled {
		if loaded {
			add("%senabled=OFF", prefix)
		} else {
			add("semi-synchronous replication not loaded")
		}
		switch {
		case f.DumpsKnown && (f.Dumps > 0 || seenBefore):
			return Replication{Verdict: VerdictAsync, Detail: detail(), Fix: f.semisyncFix()}
		case f.DumpsKnown:
			return noReplica("no replica seen since this node started")
		}
		missing = append(missing, "whether replicas read the binary log ("+f.DumpsWhy+")")
		grants = append(grants, "PROCESS")
		replicaUnknown()
		return unknownReplication(f, found, missing, grants)
	}

	add("%senabled=ON", prefix)
	waitPoint := strings.ToUpper(strings.TrimSpace(f.Vars[prefix+"wait_point"]))
	status, statusKnown := f.Status[statusPrefix+"status"]
	clientsStr, clientsKnown := f.Status[statusPrefix+"clients"]
	clients, err := strconv.Atoi(strings.TrimSpace(clientsStr))
	clientsKnown = clientsKnown && err == nil
	if waitPoint != "" {
		add("%swait_point=%s", prefix, waitPoint)
	}
	if statusKnown {
		add("%sstatus=%s", statusPrefix, strings.ToUpper(status))
	}
	if clientsKnown {
		add("%d semi-synchronous %s", clients, plural(clients, "replica", "replicas"))
	}
	nothingAttached := f.DumpsKnown && f.Dumps == 0

	switch waitPoint {
	case "AFTER_COMMIT":
		// Semi-synchronous replication enabled is a configured replica,
		// connected or not (legacy: none attached read as none at all).
		if legacy && nothingAttached {
			return noReplica("set " + prefix + "wait_point=AFTER_SYNC before adding a replica")
		}
		return Replication{Verdict: VerdictSemisyncAfterCommit, Detail: detail(),
			Fix: fmt.Sprintf("SET GLOBAL %swait_point=AFTER_SYNC (lossless semi-synchronous replication) and the same in my.cnf. %s", prefix, meanwhile)}
	case "AFTER_SYNC":
	default:
		missing = append(missing, "@@"+prefix+"wait_point")
		return unknownReplication(f, found, missing, grants)
	}
	if !statusKnown {
		missing = append(missing, "status "+statusPrefix+"status")
		return unknownReplication(f, found, missing, grants)
	}
	if isOn(status) && (!clientsKnown || clients > 0) {
		if !f.ReplicaKnown {
			add("whether this server is itself a replica could not be read (%s)", f.ReplicaWhy)
		}
		if f.DumpsKnown && clientsKnown && f.Dumps > clients {
			add("%d asynchronous: fail over only to a semi-synchronous replica", f.Dumps-clients)
		}
		return Replication{Verdict: VerdictSemisyncLossless, Detail: detail()}
	}
	if legacy && nothingAttached {
		return noReplica("semi-synchronous replication is on but no replica is connected: commits may wait " + prefix + "timeout")
	}
	// Semi-synchronous replication is enabled, so a replica is configured,
	// but none acknowledges now: it is reconnecting or lagging (MySQL 8
	// with wait_no_replica=OFF, or after the timeout, commits go on
	// without it), and it is the replica a failover promotes.
	if nothingAttached {
		add("no replica is connected now: the configured semi-synchronous replica is reconnecting or gone")
	}
	if v, ok := f.Vars[prefix+"timeout"]; ok {
		add("%stimeout=%s ms", prefix, v)
	}
	noReplicaVar, replicaVar := prefix+"wait_no_slave", "rpl_semi_sync_slave_enabled"
	if prefix == "rpl_semi_sync_source_" {
		noReplicaVar, replicaVar = prefix+"wait_no_replica", "rpl_semi_sync_replica_enabled"
	}
	if v, ok := f.Vars[noReplicaVar]; ok {
		add("%s=%s", noReplicaVar, strings.ToUpper(v))
	}
	return Replication{Verdict: VerdictSemisyncDegraded, Detail: detail(),
		Fix: fmt.Sprintf("find why no semi-synchronous replica acknowledges (on the replicas: %s=ON, replication I/O thread running, network); the primary switches back to semi-synchronous by itself when one catches up. So that it does not fall back silently: SET GLOBAL %stimeout=<high, e.g. 4294967295>; SET GLOBAL %s=ON; and in my.cnf. %s",
			replicaVar, prefix, noReplicaVar, meanwhile)}
}

// unknownReplication is the unknown verdict: what was read, what was
// not, and the GRANT that lets idgen read it.
func unknownReplication(f replicationFacts, found, missing, grants []string) Replication {
	d := strings.Join(found, ", ")
	if d != "" {
		d += "; "
	}
	d += "could not read " + strings.Join(missing, ", ")
	fix := ""
	if len(grants) > 0 {
		fix = fmt.Sprintf("To let idgen read it: GRANT %s ON *.* TO %s;", strings.Join(grants, ", "), grantee(f.User))
		if slices.Contains(grants, "PROCESS") {
			fix += " (a privilege held only through a role is not seen)"
		}
	}
	return Replication{Verdict: VerdictUnknown, Detail: d, Fix: fix}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ReadReplication reads the replication setup over db and judges it. It
// reads SHOW GLOBAL VARIABLES and SHOW GLOBAL STATUS (no privilege), the
// binlog dump threads in information_schema.PROCESSLIST (all of them need
// PROCESS; MariaDB's Slaves_connected needs nothing) and SHOW REPLICA
// STATUS (REPLICATION CLIENT; MariaDB: SLAVE MONITOR, else its
// Slaves_running). A missing privilege makes the verdict unknown (or is
// noted), not an error; the error is for a server that does not answer,
// and then the verdict is unknown too.
func ReadReplication(ctx context.Context, db *sql.DB) (Replication, error) {
	f, err := readReplicationFacts(ctx, db)
	if err != nil {
		err = fmt.Errorf("read replication setup: %w", err)
		return Replication{Verdict: VerdictUnknown, Detail: err.Error()}, err
	}
	return judgeReplication(f), nil
}

// ReplicaHistory remembers across reads the most replicas seen reading
// the binary log (binlog dump threads, or semi-synchronous clients), so
// that a replica reconnecting at the moment of a read is not taken for no
// replica at all (issue 29 hole f). One history per node, kept across
// MySQL server changes: a cluster that had replicas counts as replicated
// until this node restarts. Safe for concurrent use; the zero value is
// ready.
type ReplicaHistory struct {
	mu   sync.Mutex
	seen int
}

// Seen returns the most replicas seen attached so far.
func (h *ReplicaHistory) Seen() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen
}

// Note raises the replicas seen to n (what other nodes, or this node's
// previous processes, saw: the replication guard keeps it in ZooKeeper)
// and reports whether it grew.
func (h *ReplicaHistory) Note(n int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n <= h.seen {
		return false
	}
	h.seen = n
	return true
}

// Read reads the replication setup over db like ReadReplication, judged
// with what this history saw before, and remembers what it sees now.
func (h *ReplicaHistory) Read(ctx context.Context, db *sql.DB) (Replication, error) {
	f, err := readReplicationFacts(ctx, db)
	if err != nil {
		err = fmt.Errorf("read replication setup: %w", err)
		return Replication{Verdict: VerdictUnknown, Detail: err.Error()}, err
	}
	return h.judge(f), nil
}

// judge notes the replicas in f and judges f with the history.
func (h *ReplicaHistory) judge(f replicationFacts) Replication {
	now := 0
	if f.DumpsKnown {
		now = f.Dumps
	}
	for _, k := range []string{"rpl_semi_sync_master_clients", "rpl_semi_sync_source_clients"} {
		if n, err := strconv.Atoi(strings.TrimSpace(f.Status[k])); err == nil {
			now = max(now, n)
		}
	}
	h.mu.Lock()
	h.seen = max(h.seen, now)
	f.SeenDumps = h.seen
	h.mu.Unlock()
	return judgeReplication(f)
}

// replicationVars and replicationStatus are the names read.
const (
	replicationVars = `SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'wsrep_on') OR Variable_name LIKE 'rpl_semi_sync_%'`
	// Rpl_semi_sync_slave/replica_* are left out: they are about this
	// server as a replica.
	replicationStatus = `SHOW GLOBAL STATUS WHERE Variable_name IN ('Rpl_semi_sync_master_status', 'Rpl_semi_sync_master_clients',
		'Rpl_semi_sync_source_status', 'Rpl_semi_sync_source_clients', 'Slaves_connected', 'Slaves_running',
		'wsrep_cluster_size', 'wsrep_cluster_status', 'wsrep_local_state_comment')`
)

func readReplicationFacts(ctx context.Context, db *sql.DB) (replicationFacts, error) {
	var f replicationFacts
	if err := db.QueryRowContext(ctx, `SELECT @@version, CURRENT_USER()`).Scan(&f.Version, &f.User); err != nil {
		return f, err
	}
	f.MariaDB = strings.Contains(strings.ToLower(f.Version), "mariadb")
	var err error
	if f.Vars, err = readNameValues(ctx, db, replicationVars); err != nil {
		return f, err
	}
	if f.Status, err = readNameValues(ctx, db, replicationStatus); err != nil {
		return f, err
	}
	if err := readDumps(ctx, db, &f); err != nil {
		return f, err
	}
	if err := readSources(ctx, db, &f); err != nil {
		return f, err
	}
	return f, nil
}

// readNameValues runs a SHOW ... VARIABLES/STATUS query into a map keyed
// by the lower-cased name.
func readNameValues(ctx context.Context, db *sql.DB, query string) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var name string
		var value sql.NullString
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		m[strings.ToLower(name)] = value.String
	}
	return m, rows.Err()
}

// serverRefused reports whether err is the server answering with an error
// (a missing privilege, a syntax this server does not know), as opposed
// to not answering.
func serverRefused(err error) bool { return mysqlerr.Number(err) != 0 }

// readDumps counts the replicas reading the binary log.
func readDumps(ctx context.Context, db *sql.DB, f *replicationFacts) error {
	if v, ok := f.Status["slaves_connected"]; ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			f.Dumps, f.DumpsKnown = n, true
			return nil
		}
	}
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'`).Scan(&f.Dumps)
	switch {
	case err != nil && serverRefused(err):
		f.DumpsWhy = "information_schema.PROCESSLIST: " + err.Error()
		return nil
	case err != nil:
		return err
	case f.Dumps > 0:
		f.DumpsKnown = true
		return nil
	}
	// Without PROCESS the list holds only this user's threads: zero
	// proves nothing.
	var n int
	err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ? AND PRIVILEGE_TYPE = 'PROCESS'`,
		grantee(f.User)).Scan(&n)
	switch {
	case err != nil && serverRefused(err):
		f.DumpsWhy = "information_schema.USER_PRIVILEGES: " + err.Error()
	case err != nil:
		return err
	case n > 0:
		f.DumpsKnown = true
	default:
		f.DumpsWhy = "without the PROCESS privilege information_schema.PROCESSLIST shows only this user's threads"
	}
	return nil
}

// readSources reads whether this server is itself a replica.
func readSources(ctx context.Context, db *sql.DB, f *replicationFacts) error {
	queries := []string{"SHOW REPLICA STATUS", "SHOW SLAVE STATUS"}
	if f.MariaDB {
		queries = []string{"SHOW ALL SLAVES STATUS"} // every connection of multi-source replication
	}
	var err error
	for _, q := range queries {
		var rows []map[string]string
		if rows, err = queryMaps(ctx, db, q); err == nil {
			f.ReplicaKnown = true
			f.Sources, f.GroupReplication = describeSources(rows)
			return nil
		}
		if mysqlerr.Number(err) != mysqlerr.ParseError {
			break
		}
	}
	if !serverRefused(err) {
		return err
	}
	f.ReplicaWhy = err.Error()
	// MariaDB counts running replication SQL threads without a privilege.
	if v, ok := f.Status["slaves_running"]; ok {
		if n, perr := strconv.Atoi(strings.TrimSpace(v)); perr == nil {
			f.ReplicaKnown = true
			if n > 0 {
				f.Sources = []string{fmt.Sprintf("%d running replication %s (Slaves_running; SHOW ALL SLAVES STATUS says which)", n, plural(n, "connection", "connections"))}
			}
		}
	}
	return nil
}

// queryMaps returns every row of query as column name -> value.
func queryMaps(ctx context.Context, db *sql.DB, query string) ([]map[string]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		m := make(map[string]string, len(cols))
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// describeSources turns rows of SHOW REPLICA/SLAVE STATUS into one phrase
// per source; Group Replication's own channels are not sources but mark a
// group member.
func describeSources(rows []map[string]string) (sources []string, group bool) {
	get := func(r map[string]string, names ...string) string {
		for _, n := range names {
			if v, ok := r[n]; ok {
				return v
			}
		}
		return ""
	}
	for _, r := range rows {
		channel := get(r, "Channel_Name", "Channel_name", "Connection_name")
		if strings.HasPrefix(channel, "group_replication_") {
			group = true
			continue
		}
		s := get(r, "Source_Host", "Master_Host")
		if p := get(r, "Source_Port", "Master_Port"); p != "" {
			s += ":" + p
		}
		if channel != "" {
			s = fmt.Sprintf("%s (connection %q)", s, channel)
		}
		s += fmt.Sprintf(" [I/O thread %s, SQL thread %s]",
			orDash(get(r, "Replica_IO_Running", "Slave_IO_Running")), orDash(get(r, "Replica_SQL_Running", "Slave_SQL_Running")))
		sources = append(sources, s)
	}
	return sources, group
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// CheckReplicationDSN opens dsn and reads its replication setup (for
// `idctl db check`).
func CheckReplicationDSN(ctx context.Context, dsn string) (Replication, error) {
	db, mc, err := openDB(dsn, DefaultTimeout)
	if err != nil {
		return Replication{Verdict: VerdictUnknown, Detail: err.Error()}, err
	}
	defer db.Close()
	r, err := ReadReplication(ctx, db)
	if err != nil {
		err = mysqldb.ClassifyErr(ctx, "read replication setup from "+redactedDSN(mc), errors.Unwrap(err), mc.Addr, DefaultTimeout)
		return Replication{Verdict: VerdictUnknown, Detail: err.Error()}, err
	}
	return r, nil
}
