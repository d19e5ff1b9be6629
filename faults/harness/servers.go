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
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver the DSNs are for

	"github.com/idgen/idgen/internal/freeport"
)

// Servers are the ZooKeeper and MariaDB that ./build.sh faults started
// (servers_start writes their addresses and pid files into its temp dir).
// The suite kills, wipes and restarts them; each restart writes the new pid
// into the same pid file, so build.sh's exit trap (stop_dir) still stops
// them by pid.
type Servers struct {
	Dir       string // IDGEN_TEST_DIR
	ZKAddr    string
	ZKCfg     string
	MySQLBase string // root@tcp(127.0.0.1:port)/
	MySQLPort int
	DataDir   string
	Socket    string
	Mariadbd  string
	ZKServer  string
	unsafe    bool
}

// ServersFromEnv reads the environment build.sh's servers_start wrote.
func ServersFromEnv() (*Servers, error) {
	s := &Servers{Dir: os.Getenv("IDGEN_TEST_DIR"), ZKAddr: os.Getenv("IDGEN_TEST_ZK"), ZKCfg: os.Getenv("IDGEN_TEST_ZK_CFG"),
		MySQLBase: os.Getenv("IDGEN_TEST_MYSQL"), DataDir: os.Getenv("IDGEN_TEST_MYSQL_DATADIR"),
		Socket: os.Getenv("IDGEN_TEST_MYSQL_SOCKET"), Mariadbd: os.Getenv("IDGEN_FAULTS_MARIADBD"),
		ZKServer: os.Getenv("IDGEN_FAULTS_ZKSERVER")}
	s.MySQLPort, _ = strconv.Atoi(os.Getenv("IDGEN_TEST_MYSQL_PORT"))
	if s.Dir == "" || s.ZKAddr == "" || s.MySQLBase == "" || s.MySQLPort == 0 || s.Mariadbd == "" || s.ZKServer == "" {
		return nil, errors.New("IDGEN_TEST_* / IDGEN_FAULTS_* not set: run the suite through ./build.sh faults")
	}
	return s, nil
}

func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// killPidFile SIGKILLs the pid in path and waits until it is gone (or a
// zombie of build.sh's shell, which no longer listens).
func killPidFile(path string, addr string) {
	pid := readPid(path)
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitClosed(addr, 30*time.Second)
}

func waitClosed(addr string, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
}

// waitOpen waits until process pid listens on addr: a restart keeps the
// server's port, and an answer there from whatever took it meanwhile is
// not the server's (freeport.HeldBy).
func waitOpen(addr string, d time.Duration, pid int) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if held, _ := freeport.AddrsHeldBy(pid, addr); held {
			return nil
		}
		if !alive(pid) {
			return fmt.Errorf("process %d exited before it listened on %s", pid, addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not accepting connections after %v", addr, d)
}

// startDetached starts a server process whose pid goes to pidFile. It is
// reaped by a goroutine; Pdeathsig stops it if the suite dies (build.sh's
// trap stops it by pid otherwise).
func startDetached(name string, args, env []string, logPath, pidFile string) (int, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return 0, err
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return pid, err
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	return pid, nil
}

// ZKKill SIGKILLs ZooKeeper.
func (s *Servers) ZKKill() { killPidFile(filepath.Join(s.Dir, "zk", "pid"), s.ZKAddr) }

// ZKStart starts ZooKeeper again with its configuration and data.
func (s *Servers) ZKStart() error {
	pid, err := startDetached(s.ZKServer, []string{"start-foreground", s.ZKCfg},
		[]string{"JVMFLAGS=-Xmx256m -Dzookeeper.root.logger=INFO,CONSOLE"},
		filepath.Join(s.Dir, "zk", "server.log"), filepath.Join(s.Dir, "zk", "pid"))
	if err != nil {
		return err
	}
	return waitOpen(s.ZKAddr, 60*time.Second, pid)
}

// ZKWipe stops ZooKeeper, deletes its data and starts it empty on the same
// port: every znode, session and zxid is gone.
func (s *Servers) ZKWipe() error {
	s.ZKKill()
	if err := os.RemoveAll(filepath.Join(s.Dir, "zk", "data")); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "zk", "data"), 0o755); err != nil {
		return err
	}
	return s.ZKStart()
}

func (s *Servers) mysqlAddr() string { return fmt.Sprintf("127.0.0.1:%d", s.MySQLPort) }

// MySQLKill SIGKILLs MariaDB (no clean shutdown; InnoDB recovers at start).
func (s *Servers) MySQLKill() {
	killPidFile(filepath.Join(s.Dir, "mysql", "mysqld.pid"), s.mysqlAddr())
	// The server's own pid file names the same process.
	if pid := readPid(filepath.Join(s.Dir, "mysql", "pid")); alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// MySQLStop shuts MariaDB down cleanly (SIGTERM), killing it after 60s.
func (s *Servers) MySQLStop() {
	pid := readPid(filepath.Join(s.Dir, "mysql", "mysqld.pid"))
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(60 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(b), ") Z ") {
			break // a zombie of build.sh's shell
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.MySQLKill()
}

// MySQLStart starts MariaDB with the flags build.sh uses; unsafe starts it
// with innodb_flush_log_at_trx_commit=0 and sync_binlog=0 (the negative
// control), else with both at 1.
func (s *Servers) MySQLStart(unsafe bool) error {
	flush := "1"
	if unsafe {
		flush = "0"
	}
	args := []string{"--no-defaults", "--datadir=" + s.DataDir, "--socket=" + s.Socket, fmt.Sprintf("--port=%d", s.MySQLPort),
		"--bind-address=127.0.0.1"}
	if os.Getuid() == 0 {
		args = append(args, "--user=root")
	}
	args = append(args, "--pid-file="+filepath.Join(s.Dir, "mysql", "pid"), "--innodb-buffer-pool-size=128M",
		"--innodb-flush-log-at-trx-commit="+flush, "--sync-binlog="+flush, "--max-connections=1000", "--skip-name-resolve")
	pid, err := startDetached(s.Mariadbd, args, nil, filepath.Join(s.Dir, "mysql", "server.log"), filepath.Join(s.Dir, "mysql", "mysqld.pid"))
	if err != nil {
		return err
	}
	s.unsafe = unsafe
	if err := waitOpen(s.mysqlAddr(), 120*time.Second, pid); err != nil {
		return err
	}
	db, err := sql.Open("mysql", s.MySQLBase)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MariaDB not answering: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// MySQLUnsafe reports whether MariaDB runs without crash safety.
func (s *Servers) MySQLUnsafe() bool { return s.unsafe }

// CreateDatabase creates a fresh database and returns its DSN.
func (s *Servers) CreateDatabase(name string) (string, error) {
	db, err := sql.Open("mysql", s.MySQLBase)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.MySQLBase + name, nil
}
