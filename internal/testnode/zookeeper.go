package testnode

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// zkServerScript is where Debian's zookeeper package puts its launcher.
const zkServerScript = "/usr/share/zookeeper/bin/zkServer.sh"

// ZooKeeper is a ZooKeeper server of one test alone, so the test can stop,
// wipe and restart it without disturbing other tests that share the server
// started by ./build.sh test.
type ZooKeeper struct {
	t      testing.TB
	dir    string
	Port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartZooKeeper starts a standalone ZooKeeper on a free loopback port with
// its data in a temp dir. It skips the test when ZooKeeper is not
// installed.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	if !fileExists(zkServerScript) {
		t.Skip(zkServerScript + " not found: ./build.sh test installs ZooKeeper")
	}
	dir, err := os.MkdirTemp("", "idgen-zk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	z := &ZooKeeper{t: t, dir: dir, Port: FreePort(t)}
	cfg := fmt.Sprintf("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
		"minSessionTimeout=1000\nmaxSessionTimeout=60000\nmaxClientCnxns=0\nadmin.enableServer=false\n",
		filepath.Join(dir, "data"), z.Port)
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Stop)
	z.Start()
	return z
}

// Addr returns host:port.
func (z *ZooKeeper) Addr() string { return fmt.Sprintf("127.0.0.1:%d", z.Port) }

// Start starts the server in the foreground of a child process group and
// waits until it accepts connections.
func (z *ZooKeeper) Start() {
	z.t.Helper()
	if err := os.MkdirAll(filepath.Join(z.dir, "data"), 0o755); err != nil {
		z.t.Fatal(err)
	}
	log, err := os.OpenFile(filepath.Join(z.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		z.t.Fatal(err)
	}
	defer log.Close()
	z.cmd = exec.Command(zkServerScript, "start-foreground", filepath.Join(z.dir, "zoo.cfg"))
	z.cmd.Env = append(os.Environ(), "ZOO_LOG_DIR="+z.dir, "JVMFLAGS=-Xmx128m")
	z.cmd.Stdout, z.cmd.Stderr = log, log
	z.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := z.cmd.Start(); err != nil {
		z.t.Fatal(err)
	}
	z.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(z.cmd, z.exited)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", z.Addr(), time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case <-z.exited:
			out, _ := os.ReadFile(filepath.Join(z.dir, "server.log"))
			z.t.Fatalf("ZooKeeper exited at start:\n%s", out)
		default:
		}
		time.Sleep(100 * time.Millisecond)
	}
	z.t.Fatalf("ZooKeeper not listening on %s after 60s", z.Addr())
}

// Stop kills the server's process group and waits for it to exit.
func (z *ZooKeeper) Stop() {
	if z.cmd == nil || z.cmd.Process == nil {
		return
	}
	select {
	case <-z.exited:
		return
	default:
	}
	_ = syscall.Kill(-z.cmd.Process.Pid, syscall.SIGKILL)
	<-z.exited
}

// Wipe stops the server, deletes all its data and starts it again empty on
// the same port: every znode, session and zxid is gone, as after an
// operator re-provisions the ensemble.
func (z *ZooKeeper) Wipe() {
	z.t.Helper()
	z.Stop()
	if err := os.RemoveAll(filepath.Join(z.dir, "data")); err != nil {
		z.t.Fatal(err)
	}
	z.Start()
}
