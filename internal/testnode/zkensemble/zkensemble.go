// Package zkensemble runs a real multi-server ZooKeeper ensemble on
// loopback, with Debian's zkServer.sh, for tests and for the fault suite.
// Production runs an ensemble of three or five servers, where leader
// elections, rolling restarts and restores from a copy of the data dirs are
// routine; a single test server shows none of them.
//
// It depends on neither the testing package nor the service, so the fault
// suite (a plain program that keeps the service at arm's length) and
// testnode.StartEnsemble (the test helper) share one implementation. Every
// method returns an error instead of failing a test.
package zkensemble

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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

// Script is where Debian's zookeeper package puts its launcher.
const Script = "/usr/share/zookeeper/bin/zkServer.sh"

// Installed reports whether Script exists.
func Installed() bool {
	_, err := os.Stat(Script)
	return err == nil
}

// Config shapes an ensemble.
type Config struct {
	Dir string // server i lives in Dir/zk<i+1>: zoo.cfg, data/ (with myid), server.log
	N   int    // servers (3 or 5: a majority must survive one loss)
	// TickTime is ZooKeeper's time unit (default 500ms: elections and
	// session expiry in seconds, as the suite's 3 s sessions need).
	TickTime time.Duration
	// JVMFlags for every server (default: 128 MiB heap, serial GC, C1 only:
	// three JVMs start on two shared cores without starving the rest).
	JVMFlags string
	// PidFile, when set, names a file that holds server i's pid while it
	// runs, so a supervisor (./build.sh faults' exit trap) can stop servers
	// this process no longer can.
	PidFile func(i int) string
}

// Ensemble is N ZooKeeper servers on 127.0.0.1, each with its own client,
// quorum and election port and data dir. Servers are numbered from 0 here;
// server i has myid i+1 (ZooKeeper's server.N numbering starts at 1).
type Ensemble struct {
	cfg     Config
	servers []*server
}

type server struct {
	i                        int
	dir                      string
	client, quorum, election int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// New prepares an ensemble (ports, zoo.cfg and myid of every server)
// without starting it.
func New(cfg Config) (*Ensemble, error) {
	if !Installed() {
		return nil, fmt.Errorf("%s not found: install Debian's zookeeper package (./build.sh test does)", Script)
	}
	if cfg.N < 1 {
		return nil, errors.New("zkensemble: N must be at least 1")
	}
	if cfg.TickTime == 0 {
		cfg.TickTime = 500 * time.Millisecond
	}
	if cfg.JVMFlags == "" {
		cfg.JVMFlags = "-Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
	}
	ports := make([]int, 3*cfg.N)
	for i := range ports {
		p, err := freeport.Pick() // distinct: never handed out twice
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	e := &Ensemble{cfg: cfg}
	var peers strings.Builder
	for i := range cfg.N {
		s := &server{i: i, dir: filepath.Join(cfg.Dir, fmt.Sprintf("zk%d", i+1)),
			client: ports[3*i], quorum: ports[3*i+1], election: ports[3*i+2]}
		e.servers = append(e.servers, s)
		fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", i+1, s.quorum, s.election)
	}
	for _, s := range e.servers {
		// preAllocSize: ZooKeeper preallocates 64 MiB per transaction log;
		// 4 MiB keeps Snapshot's copies small and fast.
		cfgText := fmt.Sprintf("tickTime=%d\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"minSessionTimeout=1000\nmaxSessionTimeout=60000\nmaxClientCnxns=0\nadmin.enableServer=false\npreAllocSize=4096\n"+
			"4lw.commands.whitelist=srvr,stat,mntr,conf,ruok\n%s",
			cfg.TickTime.Milliseconds(), s.dataDir(), s.client, peers.String())
		if err := os.MkdirAll(s.dataDir(), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfgText), 0o644); err != nil {
			return nil, err
		}
		if err := s.writeMyid(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (s *server) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *server) writeMyid() error {
	return os.WriteFile(filepath.Join(s.dataDir(), "myid"), []byte(strconv.Itoa(s.i+1)+"\n"), 0o644)
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.client) }

// N returns the number of servers.
func (e *Ensemble) N() int { return len(e.servers) }

// Addrs returns every server's client address, in server order.
func (e *Ensemble) Addrs() []string {
	a := make([]string, len(e.servers))
	for i, s := range e.servers {
		a[i] = s.addr()
	}
	return a
}

// Connect returns the connect string (comma-separated client addresses).
func (e *Ensemble) Connect() string { return strings.Join(e.Addrs(), ",") }

// DataDir returns server i's data dir.
func (e *Ensemble) DataDir(i int) string { return e.servers[i].dataDir() }

func (e *Ensemble) srv(i int) (*server, error) {
	if i < 0 || i >= len(e.servers) {
		return nil, fmt.Errorf("zkensemble: no server %d (0..%d)", i, len(e.servers)-1)
	}
	return e.servers[i], nil
}

// StartAll starts every server that is not running and waits until the
// ensemble serves (WaitServing), at most d.
func (e *Ensemble) StartAll(d time.Duration) error {
	errs := make([]error, len(e.servers))
	var wg sync.WaitGroup
	for i := range e.servers {
		if e.Running(i) {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = e.Start(i) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return e.WaitServing(d)
}

// Start starts server i (start-foreground: the script execs the JVM, so the
// child is the server itself) and waits until its client port accepts
// connections, at most 60 s. Accepting is not serving: a server answers
// requests only once it has joined a quorum (see WaitServing).
func (e *Ensemble) Start(i int) error {
	s, err := e.srv(i)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.cmd != nil {
		select {
		case <-s.done:
		default:
			s.mu.Unlock()
			return fmt.Errorf("zkensemble: server %d already running", i)
		}
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	fmt.Fprintf(logf, "\n==== zkensemble: start server %d at %s\n", i+1, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(Script, "start-foreground", filepath.Join(s.dir, "zoo.cfg"))
	// Debian's zkEnv.sh sets ZOO_LOG_DIR to /var/log/zookeeper whatever the
	// environment says; start-foreground never writes there (only `start`
	// does), so it runs unprivileged. ZOO_LOG_DIR is set for other builds.
	cmd.Env = append(os.Environ(), "ZOO_LOG_DIR="+s.dir, "JVMFLAGS="+e.cfg.JVMFlags)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group (Kill reaches the JVM whatever it forks), and dies
	// with this process even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.mu.Unlock()
		return err
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	pidFile := ""
	if e.cfg.PidFile != nil {
		pidFile = e.cfg.PidFile(i)
		_ = os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		if pidFile != "" {
			_ = os.Remove(pidFile)
		}
		close(done)
	}()
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		// The JVM (zkServer.sh execs it) holds its client port: a port
		// another process took is not taken for this server's.
		if held, _ := freeport.AddrsHeldBy(cmd.Process.Pid, s.addr()); held {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("zkensemble: server %d exited at start:\n%s", i, tail(filepath.Join(s.dir, "server.log"), 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("zkensemble: server %d not listening on %s after 60s", i, s.addr())
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Running reports whether server i's process is alive.
func (e *Ensemble) Running(i int) bool {
	s, err := e.srv(i)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Pid returns server i's pid (0 when it is down).
func (e *Ensemble) Pid(i int) int {
	if !e.Running(i) {
		return 0
	}
	s := e.servers[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// signal sends sig to server i's process group and waits for the exit, at
// most d; false: still running.
func (e *Ensemble) signal(i int, sig syscall.Signal, d time.Duration) bool {
	s, err := e.srv(i)
	if err != nil {
		return true
	}
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Kill SIGKILLs server i (a crash: no clean shutdown) and waits until it
// has exited.
func (e *Ensemble) Kill(i int) error {
	if !e.signal(i, syscall.SIGKILL, 30*time.Second) {
		return fmt.Errorf("zkensemble: server %d still running 30s after SIGKILL", i)
	}
	return nil
}

// Stop shuts server i down cleanly (SIGTERM), killing it after 20 s.
func (e *Ensemble) Stop(i int) error {
	if e.signal(i, syscall.SIGTERM, 20*time.Second) {
		return nil
	}
	return e.Kill(i)
}

// Close kills every server.
func (e *Ensemble) Close() {
	var wg sync.WaitGroup
	for i := range e.servers {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Kill(i) }()
	}
	wg.Wait()
}

// Status is what a server's `srvr` four-letter word says.
type Status struct {
	Mode string // "leader", "follower", "standalone"; "" when not serving
	Zxid int64  // last zxid: epoch << 32 | counter
}

// Serving reports whether the server answers client requests.
func (s Status) Serving() bool {
	return s.Mode == "leader" || s.Mode == "follower" || s.Mode == "standalone"
}

// Status asks server i with `srvr`. A server that runs but has no quorum
// answers "not currently serving requests": Mode "", no error. go-zookeeper's
// zk.FLWSrvr cannot be used: its pattern rejects the version and date Debian's
// 3.8 build prints ("3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC").
func (e *Ensemble) Status(i int) (Status, error) {
	s, err := e.srv(i)
	if err != nil {
		return Status{}, err
	}
	out, err := fourLetterWord(s.addr(), "srvr", time.Second)
	if err != nil {
		return Status{}, err
	}
	var st Status
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		switch k {
		case "Mode":
			st.Mode = strings.TrimSpace(v)
		case "Zxid":
			st.Zxid, _ = strconv.ParseInt(strings.TrimSpace(v), 0, 64)
		}
	}
	return st, nil
}

func fourLetterWord(addr, word string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(word)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Leader returns the index of the server that reports itself leader (or
// standalone: a one-server ensemble), or -1 (none: an election is under
// way, or a majority is down).
func (e *Ensemble) Leader() int {
	for i := range e.servers {
		if !e.Running(i) {
			continue
		}
		if st, err := e.Status(i); err == nil && (st.Mode == "leader" || st.Mode == "standalone") {
			return i
		}
	}
	return -1
}

// WaitServing waits until every running server serves (leader or follower)
// and exactly one of them leads, at most d (a one-server "ensemble" runs
// standalone: that server counts as the leader). A restarted follower serves only
// once it has synced with the leader, so this is the condition to wait for
// before the next server of a rolling restart.
func (e *Ensemble) WaitServing(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for {
		leaders, up, serving := 0, 0, 0
		var states []string
		for i := range e.servers {
			if !e.Running(i) {
				states = append(states, fmt.Sprintf("%d:down", i))
				continue
			}
			up++
			st, err := e.Status(i)
			switch {
			case err != nil:
				states = append(states, fmt.Sprintf("%d:%v", i, err))
			case st.Serving():
				serving++
				if st.Mode == "leader" || st.Mode == "standalone" {
					leaders++
				}
				states = append(states, fmt.Sprintf("%d:%s", i, st.Mode))
			default:
				states = append(states, fmt.Sprintf("%d:not serving", i))
			}
		}
		if up > 0 && serving == up && leaders == 1 {
			return nil
		}
		last = strings.Join(states, " ")
		if time.Now().After(deadline) {
			return fmt.Errorf("zkensemble: not serving after %v: %s", d, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitLeader waits until a server other than not (-1: any) leads and a
// majority of the ensemble serves, at most d, and returns the leader.
func (e *Ensemble) WaitLeader(not int, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		leader, serving := -1, 0
		for i := range e.servers {
			if !e.Running(i) {
				continue
			}
			if st, err := e.Status(i); err == nil && st.Serving() {
				serving++
				if st.Mode == "leader" {
					leader = i
				}
			}
		}
		if leader >= 0 && leader != not && serving > len(e.servers)/2 {
			return leader, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("zkensemble: no new leader after %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Snapshot copies every server's data dir into dst/zk<i+1> while the
// ensemble runs: what an operator who backs up ZooKeeper by copying its
// data dirs restores from. The copy of a live transaction log may end in a
// partial record, as after a crash; ZooKeeper's log reader treats a record
// without its end marker as the end of the log.
func (e *Ensemble) Snapshot(dst string) error {
	for _, s := range e.servers {
		if err := copyDir(s.dataDir(), filepath.Join(dst, filepath.Base(s.dir))); err != nil {
			return fmt.Errorf("zkensemble: snapshot of server %d: %w", s.i, err)
		}
	}
	return nil
}

// Restore stops every server cleanly, replaces each data dir by its copy in
// src (made by Snapshot), starts them all and waits until the ensemble
// serves, at most d. Every znode, session and zxid written after the
// snapshot is gone.
func (e *Ensemble) Restore(src string, d time.Duration) error {
	for _, s := range e.servers {
		if _, err := os.Stat(filepath.Join(src, filepath.Base(s.dir), "myid")); err != nil {
			return fmt.Errorf("zkensemble: %s is not a snapshot of this ensemble: %w", src, err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(e.servers))
	for i := range e.servers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = e.Stop(i) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, s := range e.servers {
		if err := os.RemoveAll(s.dataDir()); err != nil {
			return err
		}
		if err := copyDir(filepath.Join(src, filepath.Base(s.dir)), s.dataDir()); err != nil {
			return err
		}
	}
	return e.StartAll(d)
}

// copyDir copies the regular files and directories under src to dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if de.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !de.Type().IsRegular() {
			return nil
		}
		return copyFile(path, target)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
