package harness

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/freeport"
)

// fakeNodeEnv makes the test binary a fake idgen (fakeNode) instead of
// running the tests.
const fakeNodeEnv = "IDGEN_HARNESS_FAKE_NODE"

func TestMain(m *testing.M) {
	if os.Getenv(fakeNodeEnv) != "" {
		os.Exit(fakeNode(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeNode does what the suite relies on of idgen's start: it binds
// --rpc-addr, then --admin-addr, exits 1 with the listen error ("...
// address already in use") when one is taken, and answers /readyz as
// serving. --refuse makes it exit 2 before binding, like a node that
// refuses to start; --busy, exit 1 as if its RPC port were taken.
func fakeNode(args []string) int {
	var rpc, admin string
	for i, a := range args {
		switch a {
		case "--rpc-addr":
			rpc = args[i+1]
		case "--admin-addr":
			admin = args[i+1]
		case "--refuse":
			fmt.Fprintln(os.Stderr, "idgen: refused to start")
			return 2
		case "--busy":
			fmt.Fprintln(os.Stderr, "idgen: rpc_addr: listen tcp "+rpc+": bind: address already in use")
			return 1
		}
	}
	rl, err := net.Listen("tcp", rpc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idgen: rpc_addr:", err)
		return 1
	}
	defer rl.Close()
	al, err := net.Listen("tcp", admin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idgen: admin_addr:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "fake idgen serving")
	_ = http.Serve(al, readyzServing())
	return 0
}

// readyzServing answers /readyz as a node that has started.
func readyzServing() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"channels":{"unordered":{"state":"serving"}}}`)
	})
}

// impostor takes addr and answers /readyz there as a started node: what
// the suite once took for a node that had exited on its busy port.
func impostor(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: readyzServing()}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func fakeNodeFor(t *testing.T, args ...string) *Node {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode("n0", bin, t.TempDir(), args, []string{fakeNodeEnv + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	return n
}

func (n *Node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd.Process.Pid
}

func TestNodeStart(t *testing.T) {
	n := fakeNodeFor(t)
	if err := n.Start(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !n.Running() || n.Inc() != 1 {
		t.Fatalf("after Start: running %v, incarnation %d; want true, 1", n.Running(), n.Inc())
	}
	if n.Args[1] != n.RPCAddr || n.Args[3] != n.AdminAddr {
		t.Fatalf("Args %q do not carry the node's addresses %s, %s", n.Args, n.RPCAddr, n.AdminAddr)
	}
}

// A node whose port another process took before its first start is
// started again on fresh ports: the impostor's answers do not count.
func TestNodeFirstStartMovesOffABusyPort(t *testing.T) {
	n := fakeNodeFor(t)
	taken := n.AdminAddr
	impostor(t, taken)
	if err := n.Start(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n.AdminAddr == taken || n.Args[3] != n.AdminAddr {
		t.Fatalf("node still on its taken admin port %s (Args %q)", taken, n.Args)
	}
	if n.Inc() != 2 {
		t.Fatalf("incarnation %d, want 2 (one start on the busy port, one on fresh ports)", n.Inc())
	}
	if held, err := freeport.AddrsHeldBy(n.pid(), n.RPCAddr, n.AdminAddr); !held {
		t.Fatalf("node's process does not hold its ports after Start: %v", err)
	}
	if ls := n.LogLines(0, "starting again on"); len(ls) != 1 {
		t.Fatalf("log lines about the move: %q, want one", ls)
	}
}

// A restart keeps the node's ports: one taken meanwhile is an error that
// names it, never a node the scenario runs on without (before the fix, the
// impostor's /readyz made Start return nil).
func TestNodeRestartOnBusyPortFails(t *testing.T) {
	n := fakeNodeFor(t)
	if err := n.Start(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	n.Kill()
	impostor(t, n.AdminAddr)
	admin := n.AdminAddr
	err := n.Start(30 * time.Second)
	if !errors.Is(err, ErrPortBusy) {
		t.Fatalf("restart on a taken port: %v, want ErrPortBusy", err)
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %q lacks the node's log tail", err)
	}
	if n.AdminAddr != admin || n.Running() {
		t.Fatalf("after the failed restart: admin %s (was %s), running %v", n.AdminAddr, admin, n.Running())
	}
}

// A fresh node that finds a port taken at every attempt gives up after
// portAttempts starts, with ErrPortBusy.
func TestNodeFirstStartGivesUp(t *testing.T) {
	n := fakeNodeFor(t, "--busy")
	if err := n.StartNoWait(); !errors.Is(err, ErrPortBusy) {
		t.Fatalf("StartNoWait: %v, want ErrPortBusy", err)
	}
	if n.Inc() != -1 || n.inc.Load() != portAttempts {
		t.Fatalf("after giving up: running incarnation %d, %d starts; want -1, %d", n.Inc(), n.inc.Load(), portAttempts)
	}
}

// A process that exits for another reason is no port problem: StartNoWait
// leaves it to the caller, Start reports it with the log tail.
func TestNodeStartRefused(t *testing.T) {
	n := fakeNodeFor(t, "--refuse")
	if err := n.StartNoWait(); err != nil {
		t.Fatalf("StartNoWait of a refusing node: %v, want nil (its exit is the caller's to judge)", err)
	}
	if !n.WaitExit(30*time.Second) || n.ExitCode() != 2 {
		t.Fatalf("refusing node: exit code %d", n.ExitCode())
	}
	err := n.Start(30 * time.Second)
	if err == nil || errors.Is(err, ErrPortBusy) || !strings.Contains(err.Error(), "refused to start") {
		t.Fatalf("Start of a refusing node: %v, want its exit with the log tail", err)
	}
}
