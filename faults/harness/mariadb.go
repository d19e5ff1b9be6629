package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idgen/idgen/internal/freeport"
)

// The replication scenarios (issue #18) run idgen on MariaDB topologies
// the suite starts for the scenario: a primary with an asynchronous or
// semi-synchronous replica behind a TCP proxy that plays the virtual IP,
// and a three-member Galera cluster. Every mariadbd started here runs on
// fresh loopback ports with its own data dir, has its pid in PidDir
// (mariadb-<name>.pid) while it runs, dies with the suite (PDEATHSIG), and
// is SIGKILLed with its data removed by Close.

// GaleraProvider is Debian's galera-4 provider library.
const GaleraProvider = "/usr/lib/galera/libgalera_smm.so"

// CreateDatabaseAt creates a database on the server of base (a DSN
// without database, "root@tcp(host:port)/") and returns its DSN.
func CreateDatabaseAt(base, name string) (string, error) {
	db, err := sql.Open("mysql", base)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("CREATE DATABASE %s on %s: %w", name, base, err)
	}
	return base + name, nil
}

// NewTCPProxy is a Proxy that forwards bytes as they come, without
// ZooKeeper's framing (for MySQL connections). Partition, Heal,
// SwitchTarget, Active and Close work as on NewProxy's; the ZooKeeper
// reply loss does not apply.
func NewTCPProxy(target string) (*Proxy, error) {
	p, err := NewProxy(target)
	if err == nil {
		p.raw.Store(true)
	}
	return p, err
}

// pipeRaw copies src to dst, holding each chunk while partitioned.
func (p *Proxy) pipeRaw(pc *proxyConn, src, dst net.Conn) {
	defer p.drop(pc)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate(pc) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// findBin returns the first of names found on PATH or in the usual
// sbin/bin directories.
func findBin(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
			if st, err := os.Stat(filepath.Join(d, n)); err == nil && st.Mode()&0o111 != 0 {
				return filepath.Join(d, n), nil
			}
		}
	}
	return "", fmt.Errorf("none of %s found", strings.Join(names, ", "))
}

// InstallDataDir creates a fresh MariaDB data dir (mariadb-install-db,
// root without password).
func InstallDataDir(datadir string) error {
	bin, err := findBin("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return err
	}
	if datadir, err = filepath.Abs(datadir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(datadir), 0o755); err != nil {
		return err
	}
	args := []string{"--no-defaults", "--datadir=" + datadir, "--auth-root-authentication-method=normal"}
	if os.Getuid() == 0 {
		args = append(args, "--user=root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, head(string(out), 15))
	}
	return nil
}

// copyDir copies src to dst (cp -a): a fresh data dir is cheaper copied
// than installed again.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
	return nil
}

// MariaDB is one mariadbd started by a scenario.
type MariaDB struct {
	Name  string   // for messages and the pid file
	Dir   string   // data/, server.log, sock, pid
	Port  int      // SQL port on 127.0.0.1
	Flags []string // flags after the common ones

	bin  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	db   *sql.DB
}

// NewMariaDB prepares a server in dir on a free port; its data dir is a
// copy of template ("" installs a fresh one). flags come after the
// suite's usual ones (crash-safe: innodb_flush_log_at_trx_commit=1,
// sync_binlog=1).
func NewMariaDB(name, mariadbd, dir, template string, flags []string) (*MariaDB, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	port, err := freeport.Pick()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	m := &MariaDB{Name: name, Dir: dir, Port: port, Flags: flags, bin: mariadbd}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if template != "" {
		err = copyDir(template, m.DataDir())
	} else {
		err = InstallDataDir(m.DataDir())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: data dir: %w", name, err)
	}
	return m, nil
}

// DataDir is the server's data dir.
func (m *MariaDB) DataDir() string { return filepath.Join(m.Dir, "data") }

// LogPath is the server's log (stdout and stderr).
func (m *MariaDB) LogPath() string { return filepath.Join(m.Dir, "server.log") }

// Addr is host:port of the SQL port.
func (m *MariaDB) Addr() string { return fmt.Sprintf("127.0.0.1:%d", m.Port) }

// Base is the DSN without database: root@tcp(127.0.0.1:port)/.
func (m *MariaDB) Base() string { return fmt.Sprintf("root@tcp(%s)/", m.Addr()) }

func (m *MariaDB) pidName() string { return "mariadb-" + m.Name }

// Running reports whether the process is alive.
func (m *MariaDB) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Args returns the command line: the suite's usual flags, m.Flags, extra.
func (m *MariaDB) Args(extra ...string) []string {
	args := []string{"--no-defaults", "--datadir=" + m.DataDir(), "--socket=" + filepath.Join(m.Dir, "sock"),
		fmt.Sprintf("--port=%d", m.Port), "--bind-address=127.0.0.1"}
	if os.Getuid() == 0 {
		args = append(args, "--user=root")
	}
	args = append(args, "--pid-file="+filepath.Join(m.Dir, "pid"), "--innodb-buffer-pool-size=64M",
		"--innodb-flush-log-at-trx-commit=1", "--sync-binlog=1", "--max-connections=1000", "--skip-name-resolve")
	args = append(args, m.Flags...)
	return append(args, extra...)
}

// StartNoWait starts the process with extra flags for this start only.
func (m *MariaDB) StartNoWait(extra ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done != nil {
		select {
		case <-m.done:
		default:
			return fmt.Errorf("%s: already running", m.Name)
		}
	}
	logf, err := os.OpenFile(m.LogPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n==== faults: start %s at %s\n", m.Name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(m.bin, m.Args(extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start %s: %w", m.Name, m.bin, err)
	}
	done := make(chan struct{})
	m.cmd, m.done = cmd, done
	writePid(m.pidName(), cmd.Process.Pid)
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// Start starts the process and waits until it answers a query, at most d.
func (m *MariaDB) Start(d time.Duration, extra ...string) error {
	if err := m.StartNoWait(extra...); err != nil {
		return err
	}
	return m.WaitServing(d)
}

// WaitServing waits until the server answers SELECT 1, at most d.
func (m *MariaDB) WaitServing(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		if !m.Running() {
			return m.errorf("exited while starting")
		}
		if !m.holdsPort() {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var one int
		last = m.DB().QueryRowContext(ctx, "SELECT 1").Scan(&one)
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return m.errorf("not answering after %v: %v", d, last)
}

// holdsPort reports whether the current process listens on m.Port: only
// then is an answer there the server's own, not that of whatever took the
// port while this one exits on "Address already in use".
func (m *MariaDB) holdsPort() bool {
	m.mu.Lock()
	cmd := m.cmd
	m.mu.Unlock()
	if cmd == nil {
		return false
	}
	held, _ := freeport.HeldBy(cmd.Process.Pid, m.Port)
	return held
}

// errorf is an error about the server with the tail of its log.
func (m *MariaDB) errorf(format string, a ...any) error {
	return fmt.Errorf("MariaDB %s (%s): %s; log tail (%s):\n%s", m.Name, m.Addr(), fmt.Sprintf(format, a...), m.LogPath(), m.LogTail(25))
}

// LogTail returns the last n lines of the server's log.
func (m *MariaDB) LogTail(n int) string {
	b, err := os.ReadFile(m.LogPath())
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
}

func head(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// DB returns a pool on the server (no database selected).
func (m *MariaDB) DB() *sql.DB {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db == nil {
		db, err := sql.Open("mysql", m.Base()+"?timeout=2s&readTimeout=10s&writeTimeout=10s")
		if err != nil {
			panic(err) // the DSN is ours: cannot happen
		}
		db.SetMaxIdleConns(2)
		m.db = db
	}
	return m.db
}

// Exec runs statements in order, each within 15 s.
func (m *MariaDB) Exec(stmts ...string) error {
	for _, q := range stmts {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := m.DB().ExecContext(ctx, q)
		cancel()
		if err != nil {
			return m.errorf("%s: %v", q, err)
		}
	}
	return nil
}

// Var returns a global variable (@@name) as text.
func (m *MariaDB) Var(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var v sql.NullString
	if err := m.DB().QueryRowContext(ctx, "SELECT @@GLOBAL."+name).Scan(&v); err != nil {
		return "", fmt.Errorf("%s: @@%s: %w", m.Name, name, err)
	}
	return v.String, nil
}

// Status returns a global status variable as text ("" when absent).
func (m *MariaDB) Status(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var k, v string
	err := m.DB().QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&k, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: status %s: %w", m.Name, name, err)
	}
	return v, nil
}

// SlaveStatus returns SHOW SLAVE STATUS by column (nil: not a replica).
func (m *MariaDB) SlaveStatus() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := m.DB().QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, fmt.Errorf("%s: SHOW SLAVE STATUS: %w", m.Name, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return nil, rows.Err()
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	st := map[string]string{}
	for i, c := range cols {
		st[c] = string(vals[i])
	}
	return st, nil
}

// Kill SIGKILLs the server and waits until it is gone (at most 30 s).
func (m *MariaDB) Kill() {
	m.mu.Lock()
	cmd, done, db := m.cmd, m.done, m.db
	m.db = nil
	m.mu.Unlock()
	if db != nil {
		db.Close()
	}
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
		removePid(m.pidName())
	case <-time.After(30 * time.Second):
	}
}

// Close kills the server and removes its data dir (the log stays).
func (m *MariaDB) Close() {
	m.Kill()
	_ = os.RemoveAll(m.DataDir())
	_ = os.Remove(filepath.Join(m.Dir, "sock"))
}

// ---- primary and replica -------------------------------------------------

// ReplicationFlags are the binary log flags of a primary or replica with
// server id id: row-based, crash-safe, replicas log what they apply.
func ReplicationFlags(id int) []string {
	return []string{fmt.Sprintf("--server-id=%d", id), "--log-bin=mysql-bin", "--log-slave-updates",
		"--binlog-format=ROW", "--relay-log=relay-bin"}
}

// SemiSyncPrimaryFlags make a primary wait, after syncing its binary log
// and before committing (AFTER_SYNC), until a replica has the transaction
// in its relay log; the timeout is long so it never falls back to async
// during a scenario.
var SemiSyncPrimaryFlags = []string{"--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
	"--rpl-semi-sync-master-timeout=60000"}

// SemiSyncReplicaFlags make a replica acknowledge what it received.
var SemiSyncReplicaFlags = []string{"--rpl-semi-sync-slave-enabled=ON"}

// ReplicateFrom makes m a read-only GTID replica of p, from the beginning
// of p's binary log (both started from the same fresh data dir), and waits
// until both replication threads run.
func (m *MariaDB) ReplicateFrom(p *MariaDB, d time.Duration) error {
	if err := m.Exec("SET GLOBAL read_only=ON",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', "+
			"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", p.Port),
		"START SLAVE"); err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	var st map[string]string
	for time.Now().Before(deadline) {
		var err error
		st, err = m.SlaveStatus()
		if err != nil {
			return err
		}
		if st["Slave_IO_Running"] == "Yes" && st["Slave_SQL_Running"] == "Yes" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return m.errorf("replication from %s not running after %v: IO %s SQL %s, IO error %q, SQL error %q", p.Name, d,
		st["Slave_IO_Running"], st["Slave_SQL_Running"], st["Last_IO_Error"], st["Last_SQL_Error"])
}

// WaitReplicated waits until m has applied everything p has written (p's
// @@gtid_binlog_pos), at most d.
func (m *MariaDB) WaitReplicated(p *MariaDB, d time.Duration) error {
	pos, err := p.Var("gtid_binlog_pos")
	if err != nil {
		return err
	}
	return m.waitGTID(pos, d)
}

func (m *MariaDB) waitGTID(pos string, d time.Duration) error {
	if pos == "" {
		return nil
	}
	secs := max(1, int(d.Seconds()))
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Second)
	defer cancel()
	var res int
	if err := m.DB().QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, secs).Scan(&res); err != nil {
		return m.errorf("MASTER_GTID_WAIT(%s): %v", pos, err)
	}
	if res != 0 {
		sp, _ := m.Var("gtid_slave_pos")
		return m.errorf("not at GTID %s after %v (gtid_slave_pos %s)", pos, d, sp)
	}
	return nil
}

// ApplyRelayLog starts the SQL thread and waits until it applied all the
// replica received (Gtid_IO_Pos), at most d: the lossless promotion's
// first step. It returns the position reached.
func (m *MariaDB) ApplyRelayLog(d time.Duration) (string, error) {
	st, err := m.SlaveStatus()
	if err != nil {
		return "", err
	}
	if st == nil {
		return "", m.errorf("not a replica")
	}
	io := st["Gtid_IO_Pos"]
	if err := m.Exec("START SLAVE SQL_THREAD"); err != nil {
		return "", err
	}
	if err := m.waitGTID(io, d); err != nil {
		return "", err
	}
	// The GTID wait covers whole transactions; the positions confirm
	// nothing of the relay log is left.
	deadline := time.Now().Add(d)
	for {
		st, err = m.SlaveStatus()
		if err != nil {
			return "", err
		}
		if st["Relay_Master_Log_File"] == st["Master_Log_File"] && st["Exec_Master_Log_Pos"] == st["Read_Master_Log_Pos"] {
			return io, nil
		}
		if time.Now().After(deadline) {
			return "", m.errorf("relay log not applied after %v: read %s:%s, executed %s:%s", d,
				st["Master_Log_File"], st["Read_Master_Log_Pos"], st["Relay_Master_Log_File"], st["Exec_Master_Log_Pos"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Promote makes the replica a writable primary as it is now: whatever its
// relay log holds and it has not applied is discarded.
func (m *MariaDB) Promote() error {
	return m.Exec("STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only=OFF")
}

// ---- Galera ----------------------------------------------------------------

// Galera is a Galera cluster of MariaDB members on loopback.
type Galera struct {
	Members []*MariaDB
}

// GaleraFlags are member i's wsrep flags in a cluster whose members use
// group ports gports, IST ports iports and SST ports sports.
func GaleraFlags(cluster string, i int, gports, iports, sports []int) []string {
	var peers []string
	for _, g := range gports {
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(g))
	}
	return []string{"--wsrep-on=ON", "--wsrep-provider=" + GaleraProvider,
		"--wsrep-cluster-address=gcomm://" + strings.Join(peers, ","),
		"--wsrep-cluster-name=" + cluster, fmt.Sprintf("--wsrep-node-name=g%d", i),
		fmt.Sprintf("--wsrep-node-address=127.0.0.1:%d", gports[i]),
		fmt.Sprintf("--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=32M",
			gports[i], iports[i]),
		fmt.Sprintf("--wsrep-sst-receive-address=127.0.0.1:%d", sports[i]),
		"--wsrep-sst-method=rsync", "--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--default-storage-engine=InnoDB",
		// A small redo log: every state transfer copies it (default 96 MiB).
		"--innodb-log-file-size=16M"}
}

// StartGalera starts an n-member Galera cluster in dir: member 0
// bootstraps it (--wsrep-new-cluster) from a fresh data dir, the others
// join it by state transfer (rsync) and the call returns when all are
// Synced, at most d. names: the members' names (pid files, messages).
func StartGalera(dir, mariadbd, cluster string, names []string, d time.Duration) (*Galera, error) {
	n := len(names)
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(GaleraProvider); err != nil {
		return nil, fmt.Errorf("galera provider: %w (apt-get install galera-4 rsync)", err)
	}
	if _, err := findBin("rsync"); err != nil {
		return nil, fmt.Errorf("rsync for state transfers: %w (apt-get install rsync)", err)
	}
	// SQL, group communication, IST and SST ports: distinct, as
	// freeport.Pick never returns a port twice.
	ports := make([][]int, 4)
	for k := range ports {
		ports[k] = make([]int, n)
		for i := range n {
			if ports[k][i], err = freeport.Pick(); err != nil {
				return nil, err
			}
		}
	}
	g := &Galera{}
	for i, name := range names {
		m := &MariaDB{Name: name, Dir: filepath.Join(dir, name), Port: ports[0][i], bin: mariadbd,
			Flags: GaleraFlags(cluster, i, ports[1], ports[2], ports[3])}
		g.Members = append(g.Members, m)
	}
	deadline := time.Now().Add(d)
	m0 := g.Members[0]
	if err := InstallDataDir(m0.DataDir()); err != nil {
		return g, err
	}
	if err := m0.Start(time.Until(deadline), "--wsrep-new-cluster"); err != nil {
		return g, err
	}
	if err := g.WaitSynced(0, time.Until(deadline)); err != nil {
		return g, err
	}
	// The joiners start together; the second waits while the donor serves
	// the first (a donor serves one state transfer at a time).
	for _, m := range g.Members[1:] {
		if err := prepareJoiner(m); err != nil {
			return g, err
		}
		if err := m.StartNoWait(); err != nil {
			return g, err
		}
	}
	for i := 1; i < n; i++ {
		if err := g.WaitSynced(i, time.Until(deadline)); err != nil {
			return g, err
		}
	}
	return g, nil
}

// prepareJoiner readies m's data dir for a state transfer: as root, the
// joiner's rsync daemon runs as nobody (rsyncd's default uid when started
// by root), which must own the data dir (rsync sets its permissions) and
// everything a restart finds in it; mariadbd, running as root, uses
// nobody's files as they are. The path above it is world-traversable
// (0755).
func prepareJoiner(m *MariaDB) error {
	if err := os.MkdirAll(m.DataDir(), 0o755); err != nil {
		return err
	}
	if os.Getuid() != 0 {
		return nil
	}
	if out, err := exec.Command("chown", "-R", "nobody", m.DataDir()).CombinedOutput(); err != nil {
		return fmt.Errorf("chown -R nobody %s (for the rsync state transfer): %v: %s", m.DataDir(), err, out)
	}
	return nil
}

// WaitSynced waits until member i answers and reports
// wsrep_local_state_comment=Synced, at most d.
func (g *Galera) WaitSynced(i int, d time.Duration) error {
	m := g.Members[i]
	deadline := time.Now().Add(d)
	state := "not answering"
	for time.Now().Before(deadline) {
		if !m.Running() {
			return m.errorf("exited (state %s)", state)
		}
		if !m.holdsPort() {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if s, err := m.Status("wsrep_local_state_comment"); err == nil {
			state = s
			if s == "Synced" {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return m.errorf("not Synced after %v (state %s)", d, state)
}

// Kill SIGKILLs member i.
func (g *Galera) Kill(i int) { g.Members[i].Kill() }

// Restart starts killed member i again: it rejoins by state transfer.
// The caller waits with WaitSynced.
func (g *Galera) Restart(i int) error {
	m := g.Members[i]
	if err := prepareJoiner(m); err != nil {
		return err
	}
	return m.StartNoWait()
}

// DSN returns a member list DSN base with member first first, then the
// others in order: root@tcp(a,b,c)/.
func (g *Galera) DSN(first int) string {
	addrs := []string{g.Members[first].Addr()}
	for i, m := range g.Members {
		if i != first {
			addrs = append(addrs, m.Addr())
		}
	}
	return "root@tcp(" + strings.Join(addrs, ",") + ")/"
}

// Close kills every member and removes the data dirs.
func (g *Galera) Close() {
	var wg sync.WaitGroup
	for _, m := range g.Members {
		wg.Add(1)
		go func() { defer wg.Done(); m.Close() }()
	}
	wg.Wait()
}

// GTIDSeq returns the sequence number of domain 0 in a MariaDB GTID
// position ("0-1-1234" or "0-2-40,1-3-7"), 0 when it has none.
func GTIDSeq(pos string) int64 {
	for _, g := range strings.Split(pos, ",") {
		f := strings.Split(strings.TrimSpace(g), "-")
		if len(f) != 3 || f[0] != "0" {
			continue
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err == nil {
			return n
		}
	}
	return 0
}
