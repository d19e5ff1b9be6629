package testnode

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver the DSNs are for
)

// MariaDB is a MariaDB server of one test alone, so the test can crash and
// restart it without disturbing other tests that share the server started
// by ./build.sh test.
type MariaDB struct {
	t       testing.TB
	dir     string
	Port    int
	args    []string
	binary  string
	cmd     *exec.Cmd
	exited  chan struct{}
	logFile string
}

func findBinary(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin"} {
			if p := filepath.Join(d, n); fileExists(p) {
				return p
			}
		}
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// StartMariaDB initialises a data dir in a temp dir and starts mariadbd on a
// free loopback port. It skips the test when MariaDB is not installed.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	server := findBinary("mariadbd", "mysqld")
	install := findBinary("mariadb-install-db", "mysql_install_db")
	if server == "" || install == "" {
		t.Skip("mariadbd or mariadb-install-db not found: ./build.sh test installs them")
	}
	dir, err := os.MkdirTemp("", "idgen-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	out, err := exec.Command(install, "--no-defaults", "--datadir="+data,
		"--auth-root-authentication-method=normal", "--user=root", "--skip-test-db").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", install, err, out)
	}
	port := FreePort(t)
	m := &MariaDB{
		t: t, dir: dir, Port: port, binary: server, logFile: filepath.Join(dir, "server.log"),
		args: []string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(dir, "sock"),
			fmt.Sprintf("--port=%d", port), "--bind-address=127.0.0.1", "--user=root",
			"--pid-file=" + filepath.Join(dir, "pid"), "--innodb-buffer-pool-size=32M",
			"--max-connections=300", "--skip-name-resolve", "--log-error=" + filepath.Join(dir, "error.log")},
	}
	t.Cleanup(m.Kill)
	m.Start()
	return m
}

// Base returns the root DSN prefix; append a database name.
func (m *MariaDB) Base() string { return fmt.Sprintf("root@tcp(127.0.0.1:%d)/", m.Port) }

// Start starts the server and waits until it answers.
func (m *MariaDB) Start() {
	m.t.Helper()
	log, err := os.OpenFile(m.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		m.t.Fatal(err)
	}
	defer log.Close()
	m.cmd = exec.Command(m.binary, m.args...)
	m.cmd.Stdout, m.cmd.Stderr = log, log
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(m.cmd, m.exited)

	db, err := sql.Open("mysql", m.Base())
	if err != nil {
		m.t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-m.exited:
			errLog, _ := os.ReadFile(filepath.Join(m.dir, "error.log"))
			m.t.Fatalf("mariadbd exited at start:\n%s", errLog)
		default:
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("mariadbd not answering after 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill crashes the server (SIGKILL: no clean shutdown, InnoDB recovers at
// the next start) and waits for it to exit.
func (m *MariaDB) Kill() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	select {
	case <-m.exited:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
}
