package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// privateServer is a MariaDB of this test alone, so that it can be killed
// and restarted without disturbing other tests that share the test server.
type privateServer struct {
	t       *testing.T
	dir     string
	port    int
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

func newPrivateServer(t *testing.T) *privateServer {
	t.Helper()
	testServer(t) // same gate as every integration test
	if testing.Short() {
		t.Skip("starts its own MariaDB")
	}
	server := findBinary("mariadbd", "mysqld")
	install := findBinary("mariadb-install-db", "mysql_install_db")
	if server == "" || install == "" {
		t.Skip("mariadbd or mariadb-install-db not found")
	}
	dir, err := os.MkdirTemp("", "idgen-outage-")
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &privateServer{
		t: t, dir: dir, port: port, binary: server, logFile: filepath.Join(dir, "server.log"),
		args: []string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(dir, "sock"),
			fmt.Sprintf("--port=%d", port), "--bind-address=127.0.0.1", "--user=root",
			"--pid-file=" + filepath.Join(dir, "pid"), "--innodb-buffer-pool-size=32M",
			"--max-connections=300", "--skip-name-resolve", "--log-error=" + filepath.Join(dir, "error.log")},
	}
	t.Cleanup(p.kill)
	p.start()
	return p
}

func (p *privateServer) base() string { return fmt.Sprintf("root@tcp(127.0.0.1:%d)/", p.port) }

// start starts the server and waits until it answers.
func (p *privateServer) start() {
	p.t.Helper()
	log, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close()
	p.cmd = exec.Command(p.binary, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(p.cmd, p.exited)

	db, err := sql.Open("mysql", p.base())
	if err != nil {
		p.t.Fatal(err)
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
		case <-p.exited:
			errLog, _ := os.ReadFile(filepath.Join(p.dir, "error.log"))
			p.t.Fatalf("mariadbd exited at start:\n%s", errLog)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("mariadbd not answering after 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill crashes the server (SIGKILL: no clean shutdown, InnoDB recovers at
// the next start) and waits for it to exit.
func (p *privateServer) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// TestIntegration_Outage kills the database under load and starts it again:
// calls fail fast with ErrUnavailable while it is down, the same Store
// recovers by itself, every range handed out before the crash survived it,
// and no number is handed out twice.
func TestIntegration_Outage(t *testing.T) {
	srv := newPrivateServer(t)
	dsn := newTestDatabase(t, srv.base(), true)
	const timeout = time.Second
	s := openStore(t, dsn, func(c *Config) { c.Timeout = timeout; c.MaxOpenConns = 16 })
	b := mustCreate(t, s, segment.Biz{Name: "outage"})
	keys := []string{"a", "b", "c"}

	type call struct {
		key string // "" for UNORDERED
		r   segment.Range
	}
	const workers = 8
	var (
		stop         atomic.Bool
		restartedAt  atomic.Int64 // unix nanos
		okAfter      atomic.Int64 // successes after the restart
		failures     atomic.Int64
		slowest      atomic.Int64 // nanos, of a failed call
		mu           sync.Mutex
		results      []call
		pending      []segment.OrderedRequest // failed requests with an id, retried at the end
		unexpected   []error
		wg           sync.WaitGroup
		requestCount atomic.Int64
	)
	ctx := testCtx(t)
	for w := range workers {
		wg.Go(func() {
			last := map[string]int64{}
			for i := 0; !stop.Load(); i++ {
				var (
					c   call
					err error
					req segment.OrderedRequest
				)
				start := time.Now()
				if i%2 == 0 {
					c.r, err = s.ReserveSegment(ctx, b.Name, 10)
				} else {
					c.key = keys[(w+i)%len(keys)]
					req = segment.OrderedRequest{Biz: b.Name, SubKey: c.key, Count: int64(1 + i%3)}
					if i%3 == 0 {
						req.RequestID = fmt.Sprintf("w%d-%d", w, requestCount.Add(1))
					}
					c.r, err = s.ReserveOrdered(ctx, req)
				}
				took := time.Since(start)
				if err != nil {
					failures.Add(1)
					for {
						old := slowest.Load()
						if int64(took) <= old || slowest.CompareAndSwap(old, int64(took)) {
							break
						}
					}
					mu.Lock()
					if !errors.Is(err, segment.ErrUnavailable) {
						unexpected = append(unexpected, err)
					}
					if req.RequestID != "" {
						pending = append(pending, req)
					}
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if ra := restartedAt.Load(); ra != 0 && start.UnixNano() > ra {
					okAfter.Add(1)
				}
				if c.key != "" {
					if c.r.First <= last[c.key] {
						mu.Lock()
						unexpected = append(unexpected, fmt.Errorf("key %q: %v not above %d", c.key, c.r, last[c.key]))
						mu.Unlock()
					}
					last[c.key] = c.r.Last
				}
				mu.Lock()
				results = append(results, c)
				mu.Unlock()
			}
		})
	}

	time.Sleep(time.Second)
	srv.kill()
	failedBefore := failures.Load()
	time.Sleep(2 * time.Second)
	failedWhileDown := failures.Load() - failedBefore
	srv.start()
	restartedAt.Store(time.Now().UnixNano())
	deadline := time.Now().Add(60 * time.Second)
	for okAfter.Load() < 100 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	for _, err := range unexpected {
		t.Errorf("unexpected: %v", err)
	}
	if failedWhileDown == 0 {
		t.Errorf("no call failed while the database was down")
	}
	if okAfter.Load() < 100 {
		t.Fatalf("only %d successful calls within 60s of the restart: the store did not recover", okAfter.Load())
	}
	if sl := time.Duration(slowest.Load()); sl > timeout+2*time.Second {
		t.Errorf("a failing call took %v; Timeout is %v", sl, timeout)
	}
	// Requests whose answer was lost: a retry either replays the range
	// reserved before the crash or reserves anew, never a duplicate.
	replays := 0
	for _, req := range pending {
		r, replayed, err := s.ReserveOrderedReplay(ctx, req)
		if err != nil {
			t.Fatalf("retry of %s after recovery: %v", req.RequestID, err)
		}
		if replayed {
			replays++
		}
		results = append(results, call{req.SubKey, r})
	}

	var segs []segment.Range
	byKey := map[string][]segment.Range{}
	var maxSeg int64
	maxKey := map[string]int64{}
	for _, c := range results {
		if c.key == "" {
			segs = append(segs, c.r)
			maxSeg = max(maxSeg, c.r.Last)
		} else {
			byKey[c.key] = append(byKey[c.key], c.r)
			maxKey[c.key] = max(maxKey[c.key], c.r.Last)
		}
	}
	checkRanges(t, "UNORDERED", segs, 1, false)
	for k, rs := range byKey {
		checkRanges(t, "ORDERED "+k, rs, 1, false)
	}
	// Everything handed out survived the crash.
	var maxID int64
	if err := s.DB().QueryRowContext(ctx, `SELECT max_id FROM segment WHERE biz = ?`, b.Name).Scan(&maxID); err != nil || maxID < maxSeg {
		t.Errorf("after the crash max_id = %d (%v), but %d was handed out", maxID, err, maxSeg)
	}
	for k, m := range maxKey {
		var num int64
		if err := s.DB().QueryRowContext(ctx, `SELECT num FROM `+orderedTable(Shard(k))+` WHERE biz = ? AND sub_key = ?`, b.Name, []byte(k)).Scan(&num); err != nil || num < m {
			t.Errorf("after the crash key %q num = %d (%v), but %d was handed out", k, num, err, m)
		}
	}
	t.Logf("%d ranges handed out, %d calls failed (%d in the 2 s outage, slowest failure %v), %d request ids retried (%d replayed), %d calls succeeded after the restart",
		len(results), failures.Load(), failedWhileDown, time.Duration(slowest.Load()).Round(time.Millisecond), len(pending), replays, okAfter.Load())
}
