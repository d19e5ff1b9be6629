// Package testnode builds the idgen binary and runs it as a child process
// for end-to-end tests: real flags, real ports, real signals.
package testnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/transport"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/internal/freeport"
	"github.com/idgen/idgen/internal/wait"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/worker"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// Binary builds ./cmd/idgen once per set of build tags and returns its path.
func Binary(t testing.TB, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[tags]; ok {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir, err := os.MkdirTemp("", "idgen-bin-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "idgen")
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, "./cmd/idgen")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build idgen: %v\n%s", err, b)
	}
	built[tags] = out
	return out
}

// FreePort returns a loopback TCP port that was free a moment ago, outside
// the kernel's ephemeral range and not handed out before in this process
// (freeport.Pick says why).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Node is a running idgen process.
type Node struct {
	Bin       string
	Args      []string
	RPCAddr   string
	AdminAddr string
	Env       []string
	// AdminToken is the node's admin token, which Client sends on admin
	// RPCs ("" until known when the node generates its own).
	AdminToken string

	// generatedToken is <data_dir>/admin.token when the node generates
	// its own admin token (Options.NodeAdminToken).
	generatedToken string

	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}

	waitStarted bool
	mayExit     bool
}

// Options for Start.
type Options struct {
	Tags string // build tags, e.g. "faultinject"
	// Bin is a prebuilt idgen binary to run instead of this tree's (a
	// measurement comparing two builds); "" builds this tree with Tags.
	Bin     string
	DataDir string   // --data-dir (required for standalone)
	Args    []string // extra flags
	Env     []string // extra environment
	// NoWaitStarted: return as soon as /healthz answers instead of waiting
	// until the node has opened its store and claimed a worker slot (for
	// tests of the start-up itself).
	NoWaitStarted bool
	// MayExit: a process that exits during start is not a test failure
	// (tests of refusals check Wait and ExitCode themselves).
	MayExit bool
	// NoClusterInit: with --zk in Args, do not create the cluster first
	// (as `idctl cluster init --exists-ok` would); for tests of a node
	// that finds no cluster.
	NoClusterInit bool
	// AdminToken is the node's admin token, passed in a file by
	// --admin-token-file; "" means a fresh random one. Ignored when Args or
	// Env set an admin token themselves (Node.AdminToken is then theirs).
	AdminToken string
	// NodeAdminToken starts the node with no admin token setting, so that
	// it generates <data_dir>/admin.token itself (tests of that file);
	// Node.AdminToken is read from the file once the node is up.
	NodeAdminToken bool
}

// Start builds (once) and starts an idgen node on fresh loopback ports and
// waits until its admin port answers /healthz. The node is killed at the
// end of the test.
func Start(t testing.TB, o Options) *Node {
	t.Helper()
	n := &Node{Bin: o.Bin}
	if n.Bin == "" {
		n.Bin = Binary(t, o.Tags)
	}
	n.Env = o.Env
	if !o.NoClusterInit {
		InitCluster(t, o.Args)
	}
	n.waitStarted, n.mayExit = !o.NoWaitStarted, o.MayExit
	tokenArgs := n.adminTokenArgs(t, o)
	t.Cleanup(func() {
		n.Kill()
		if t.Failed() && n.logs != nil {
			t.Logf("node %s (%s) printed, last lines:\n%s", n.RPCAddr, strings.Join(o.Args, " "), lastLines(n.logs.String(), failLogLines))
		}
	})
	// A port FreePort returned can be taken by another process before the
	// node binds it (tests start servers in parallel): try fresh ports.
	for attempt := 1; ; attempt++ {
		n.RPCAddr = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		n.AdminAddr = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		n.Args = append([]string{"--rpc-addr", n.RPCAddr, "--admin-addr", n.AdminAddr, "--log-format", "console"}, o.Args...)
		if o.DataDir != "" {
			n.Args = append(n.Args, "--data-dir", o.DataDir)
		}
		n.Args = append(n.Args, tokenArgs...)
		n.startProcess(t)
		if attempt < 3 && n.exitedOnBusyPort(30*time.Second) {
			continue
		}
		n.waitUp(t, time.Now().Add(30*time.Second))
		n.adminToken()
		return n
	}
}

// adminTokenArgs decides the node's admin token (see Options.AdminToken)
// and returns the flags that give it to the node.
func (n *Node) adminTokenArgs(t testing.TB, o Options) []string {
	t.Helper()
	if v, ok := flagValue(o.Args, "admin-token"); ok {
		n.AdminToken = v
		return nil
	}
	if f, ok := flagValue(o.Args, "admin-token-file"); ok {
		n.AdminToken = readToken(f)
		return nil
	}
	if v, ok := envValue(o.Env, "IDGEN_ADMIN_TOKEN"); ok {
		n.AdminToken = v
		return nil
	}
	if f, ok := envValue(o.Env, "IDGEN_ADMIN_TOKEN_FILE"); ok {
		n.AdminToken = readToken(f)
		return nil
	}
	if o.NodeAdminToken {
		dir, ok := flagValue(o.Args, "data-dir")
		if o.DataDir != "" {
			dir, ok = o.DataDir, true
		}
		if !ok {
			dir = "data" // the node's default, relative to the test's directory
		}
		n.generatedToken = filepath.Join(dir, "admin.token")
		return nil
	}
	n.AdminToken = o.AdminToken
	if n.AdminToken == "" {
		n.AdminToken = NewToken()
	}
	return []string{"--admin-token-file", WriteTokenFile(t, t.TempDir(), "admin.token", n.AdminToken)}
}

// adminToken returns the node's admin token, reading a node-generated one
// from its file the first time it is there.
func (n *Node) adminToken() string {
	if n.AdminToken == "" && n.generatedToken != "" {
		n.AdminToken = readToken(n.generatedToken)
	}
	return n.AdminToken
}

// exitedOnBusyPort waits until the node answers, exits or d passes, and
// reports whether it exited because one of its ports was taken.
func (n *Node) exitedOnBusyPort(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-n.done:
			return strings.Contains(n.logs.String(), "address already in use")
		default:
		}
		if n.answers() {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func (n *Node) start(t testing.TB) {
	t.Helper()
	n.startProcess(t)
	deadline := time.Now().Add(30 * time.Second)
	n.waitUp(t, deadline)
}

// startProcess starts the process without waiting for it.
func (n *Node) startProcess(t testing.TB) {
	t.Helper()
	n.cmd = exec.Command(n.Bin, n.Args...)
	n.cmd.Env = append(os.Environ(), n.Env...)
	n.logs = &syncBuffer{}
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(n.cmd, n.done)
}

// waitUp waits until the node answers (see answers) or deadline.
func (n *Node) waitUp(t testing.TB, deadline time.Time) {
	t.Helper()
	for time.Now().Before(deadline) {
		select {
		case <-n.done:
			if n.mayExit {
				return
			}
			t.Fatalf("idgen exited during start: %v\n%s", n.cmd.ProcessState, n.logs.String())
		default:
		}
		if n.answers() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("idgen did not start within 30s\n%s", n.logs.String())
}

// answers reports whether the node answers /healthz and, when waitStarted,
// has finished start-up: /readyz no longer reports the segment channels
// (UNORDERED, and ORDERED claiming its shards) as starting (the store is open and the worker slot claimed; SNOWFLAKE may
// still wait past its slot's mark, which /readyz reports separately).
// Answers count only once the process holds both its ports: whatever took
// a port the node then failed to bind could answer in its place (another
// test's node does) while the node exits.
func (n *Node) answers() bool {
	if held, _ := freeport.AddrsHeldBy(n.cmd.Process.Pid, n.RPCAddr, n.AdminAddr); !held {
		return false
	}
	resp, err := http.Get("http://" + n.AdminAddr + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if !n.waitStarted {
		return true
	}
	_, body, err := n.Get(context.Background(), "/readyz")
	if err != nil {
		return false
	}
	var st struct {
		Channels map[string]struct {
			State string `json:"state"`
		} `json:"channels"`
	}
	if json.Unmarshal([]byte(body), &st) != nil {
		return false
	}
	// ORDERED too: a node serves SNOWFLAKE and UNORDERED before its shards
	// are claimed (issue 31); tests start from a node whose shards are.
	return st.Channels["unordered"].State != "starting" && st.Channels["unordered"].State != "" &&
		st.Channels["ordered"].State != "starting"
}

// WaitSnowflake waits until /readyz?channel=snowflake is 200 (the node
// serves SNOWFLAKE), at most d.
func (n *Node) WaitSnowflake(t testing.TB, d time.Duration) {
	t.Helper()
	WaitFor(t, d, n.RPCAddr+" serving SNOWFLAKE", func() bool {
		code, _, err := n.Get(context.Background(), "/readyz?channel=snowflake")
		return err == nil && code == http.StatusOK
	})
}

// Restart starts the same command line again (after Kill or Stop).
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	n.start(t)
}

// RestartNoWait starts the same command line again and returns as soon as
// the process runs, without waiting for any port: for tests that measure
// what callers see from the first moment.
func (n *Node) RestartNoWait(t testing.TB) {
	t.Helper()
	wait := n.waitStarted
	n.waitStarted = false
	defer func() { n.waitStarted = wait }()
	n.startProcess(t)
}

// Kill sends SIGKILL and waits for the process to exit.
func (n *Node) Kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}

// Signal sends sig to the process.
func (n *Node) Signal(sig os.Signal) error { return n.cmd.Process.Signal(sig) }

// Wait waits for the process to exit, at most d; it reports whether it did.
func (n *Node) Wait(d time.Duration) bool {
	select {
	case <-n.done:
		return true
	case <-time.After(d):
		return false
	}
}

// ExitCode returns the exit code after the process ended.
func (n *Node) ExitCode() int { return n.cmd.ProcessState.ExitCode() }

// Logs returns what the process printed so far.
func (n *Node) Logs() string { return n.logs.String() }

// Client returns a Kitex client for the node that sends the node's admin
// token on admin RPCs and on ParseID, Clock and ListWorkers when the
// request carries none (TokenMiddleware: a test-only convenience).
func (n *Node) Client(t testing.TB) idgensvc.Client {
	t.Helper()
	tok := n.adminToken()
	if tok == "" {
		// A node that generates its token and has not written it yet
		// (NoWaitStarted): the client cannot know it.
		return n.BareClient(t)
	}
	return n.BareClient(t, client.WithMiddleware(TokenMiddleware(tok)))
}

// BareClient returns a Kitex client for the node that sends no token of
// its own: for tests of what a caller without the token gets. opts are
// added to the defaults (TTHeader framing, a 5 s RPC timeout).
func (n *Node) BareClient(t testing.TB, opts ...client.Option) idgensvc.Client {
	t.Helper()
	c, err := idgensvc.NewClient("idgen", append([]client.Option{client.WithHostPorts(n.RPCAddr), client.WithRPCTimeout(5 * time.Second),
		client.WithTransportProtocol(transport.TTHeaderFramed)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Get fetches an admin HTTP path and returns the status and body. The
// node's admin token goes along as a bearer token (/status needs it;
// the other paths ignore it).
func (n *Node) Get(ctx context.Context, path string) (int, string, error) {
	return n.do(ctx, http.MethodGet, path)
}

// Post posts to an admin HTTP path.
func (n *Node) Post(ctx context.Context, path string) (int, string, error) {
	return n.do(ctx, http.MethodPost, path)
}

func (n *Node) do(ctx context.Context, method, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.AdminAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if n.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+n.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}

// WaitFor polls cond until it is true or d passes (wait.For).
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.For(t, d, what, cond)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// InitCluster creates the cluster a node started with args joins, as an
// operator's `idctl cluster init --exists-ok` would before its first node:
// with --zk in args, the cluster (--cluster, --zk-root) with the layout of
// --epoch, --idc-bits and --node-bits. Nothing happens without --zk; an
// existing cluster is left as it is.
func InitCluster(t testing.TB, args []string) {
	t.Helper()
	flag := func(name, def string) string {
		for i, a := range args {
			if a == "--"+name && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		return def
	}
	servers := flag("zk", "")
	if servers == "" {
		return
	}
	s := cluster.Settings{EpochMs: worker.DefaultEpochMs, IDCBits: worker.DefaultIDCBits, NodeBits: worker.DefaultNodeBits}
	if e := flag("epoch", ""); e != "" {
		ep, err := time.Parse(time.RFC3339, e)
		if err != nil {
			t.Fatalf("testnode: --epoch %q: %v", e, err)
		}
		s.EpochMs = ep.UnixMilli()
	}
	var err error
	if v := flag("idc-bits", ""); v != "" {
		if s.IDCBits, err = strconv.Atoi(v); err != nil {
			t.Fatalf("testnode: --idc-bits %q", v)
		}
		s.NodeBits = worker.WorkerBits - s.IDCBits
	}
	if v := flag("node-bits", ""); v != "" {
		if s.NodeBits, err = strconv.Atoi(v); err != nil {
			t.Fatalf("testnode: --node-bits %q", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := worker.DialZK(ctx, strings.Split(servers, ","), worker.DefaultSessionTimeout, flag("zk-auth", ""), nil)
	if err != nil {
		t.Fatalf("testnode: cluster init: %v", err)
	}
	defer conn.Close()
	_, err = cluster.Init(conn, flag("zk-root", worker.DefaultRoot), flag("cluster", worker.DefaultCluster), s, worker.ClusterACL(flag("zk-auth", "")))
	if err != nil && !errors.Is(err, cluster.ErrExists) {
		t.Fatalf("testnode: cluster init: %v", err)
	}
}

// failLogLines is how much of each node's log a failed test prints: the
// end of it, where what went wrong usually is, without burying the
// failure under every node's start-up.
const failLogLines = 40

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
