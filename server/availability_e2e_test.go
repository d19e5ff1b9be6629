package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/transport"
	zkpkg "github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/worker"
)

// callTimeout is the client timeout of the availability tests: every call
// to a node whose process runs must be answered (IDs or a retryable code)
// within it, never time out.
const callTimeout = 3 * time.Second

// answers calls NextIDs on every channel against n for d and fails the test
// on a call that timed out or got a non-retryable error. Connection
// refusals before the process listens are counted, not failures. It
// returns how many calls succeeded, were refused and got a retryable code.
func answers(t *testing.T, n *testnode.Node, d time.Duration, segments bool) (ok, refused, retryable int) {
	t.Helper()
	c, err := idgensvc.NewClient("idgen", client.WithHostPorts(n.RPCAddr), client.WithRPCTimeout(callTimeout),
		client.WithConnectTimeout(time.Second), client.WithTransportProtocol(transport.TTHeaderFramed))
	if err != nil {
		t.Fatal(err)
	}
	channels := []idl.Channel{idl.Channel_SNOWFLAKE}
	if segments {
		channels = append(channels, idl.Channel_UNORDERED, idl.Channel_ORDERED)
	}
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		channel := channels[i%len(channels)]
		req := &idl.NextIDsRequest{Biz: bizFor("avail", channel), Channel: &channel, Count: 5}
		if channel == idl.Channel_ORDERED {
			req.SubKey = str("k")
		}
		start := time.Now()
		_, err := c.NextIDs(context.Background(), req)
		took := time.Since(start)
		var ie *idl.IdgenError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &ie) && ie.Retryable:
			retryable++
			time.Sleep(time.Duration(min(ie.RetryAfterMs, 100)) * time.Millisecond)
		case errors.As(err, &ie):
			t.Fatalf("%s: non-retryable %v", channel, ie)
		case strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "dial"):
			refused++
			time.Sleep(20 * time.Millisecond)
		default:
			t.Fatalf("%s: call failed after %v without an answer: %v", channel, took.Round(time.Millisecond), err)
		}
	}
	return ok, refused, retryable
}

// idctlBinary builds cmd/idctl once.
var idctlOnce struct {
	sync.Once
	path string
	err  error
}

func idctl(t *testing.T) string {
	t.Helper()
	idctlOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..")
		dir, err := os.MkdirTemp("", "idctl-bin-")
		if err != nil {
			idctlOnce.err = err
			return
		}
		idctlOnce.path = filepath.Join(dir, "idctl")
		cmd := exec.Command("go", "build", "-o", idctlOnce.path, "./cmd/idctl")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			idctlOnce.err = fmt.Errorf("go build idctl: %v\n%s", err, out)
		}
	})
	if idctlOnce.err != nil {
		t.Fatal(idctlOnce.err)
	}
	return idctlOnce.path
}

// TestE2E_CrashRestartAnswersAtOnce (issue 10): a node SIGKILLed under load
// and restarted answers every call from the moment it listens — IDs or a
// retryable code, never a timeout — and `idctl get` with its default
// timeout succeeds right after the restart, standalone and in a cluster.
// How fast the first SNOWFLAKE ID comes is measured by scripts, not here.
func TestE2E_CrashRestartAnswersAtOnce(t *testing.T) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var args []string
			if mode == "cluster" {
				if zkAddr == "" || base == "" {
					t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
				}
				args = []string{"--zk", zkAddr, "--mysql", testdb.New(t, base), "--cluster", fmt.Sprintf("crash%d", rand.Uint32()),
					"--zk-session-timeout", "3s", "--heartbeat-interval", "500ms", "--outage-tolerance", "2s",
					"--advertise-host", "127.0.0.1", "--auto-create-biz", "true", "--properties-dir", t.TempDir()}
			}
			n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: args})
			n.WaitSnowflake(t, 30*time.Second)
			if ok, _, _ := answers(t, n, time.Second, true); ok == 0 {
				t.Fatal("no call succeeded before the kill")
			}
			n.Kill()
			start := time.Now()
			n.RestartNoWait(t)
			ok, refused, retryable := answers(t, n, 2*time.Second, true)
			if ok == 0 {
				t.Fatalf("no call succeeded within 2s of the restart (refused %d, retryable %d)\n%s", refused, retryable, n.Logs())
			}
			t.Logf("after restart: %d ok, %d refused before listening, %d retryable in %v", ok, refused, retryable, time.Since(start).Round(time.Millisecond))

			n.Kill()
			n.RestartNoWait(t)
			out, err := exec.Command(idctl(t), "get", "--addr", n.RPCAddr, "--biz", "avail", "--channel", "snowflake").CombinedOutput()
			if err != nil {
				t.Fatalf("idctl get right after the restart: %v\n%s\nnode logs:\n%s", err, out, n.Logs())
			}
		})
	}
}

// TestE2E_ZooKeeperOutageAndWipe (issue 10): three nodes on a private
// ZooKeeper and the shared MariaDB, under load on every channel.
//  1. ZooKeeper stops for less than the outage tolerance: SNOWFLAKE keeps
//     serving on every node, no refusal at all.
//  2. ZooKeeper is wiped (restarted with an empty data dir): the nodes
//     reconnect, re-create the cluster and re-register by themselves and
//     serve SNOWFLAKE again without a restart.
//
// Throughout, no ID is issued twice on any channel.
func TestE2E_ZooKeeperOutageAndWipe(t *testing.T) {
	base := os.Getenv("IDGEN_TEST_MYSQL")
	if base == "" || os.Getenv("IDGEN_TEST_ZK") == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	zk := testnode.StartZooKeeper(t)
	dsn := testdb.New(t, base)
	cluster := fmt.Sprintf("wipe%d", rand.Uint32())
	var nodes []*testnode.Node
	var callers []caller
	for i := range 3 {
		n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{
			"--zk", zk.Addr(), "--cluster", cluster, "--mysql", dsn, "--zk-session-timeout", "3s",
			"--heartbeat-interval", "500ms", "--outage-tolerance", "8s", "--advertise-host", "127.0.0.1",
			"--auto-create-biz", "true", "--properties-dir", t.TempDir()}})
		n.WaitSnowflake(t, 60*time.Second)
		nodes = append(nodes, n)
		c := n.Client(t)
		for _, w := range []idl.Channel{idl.Channel_SNOWFLAKE, idl.Channel_UNORDERED, idl.Channel_ORDERED} {
			callers = append(callers, caller{c: c, biz: "wipe", ch: w, subKey: fmt.Sprintf("key-%d", i%2)})
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("node %d (%s) worker log:\n%s", i, n.RPCAddr, workerLines(n.Logs()))
			}
		}
	})
	var phase sync.Map // "outage" -> true while ZooKeeper is down for less than the tolerance
	outageRefusals := 0
	ld := startLoad(t, callers, func(ch idl.Channel, err error) {
		if err != nil && ch == idl.Channel_SNOWFLAKE {
			if _, on := phase.Load("outage"); on {
				outageRefusals++
				t.Errorf("SNOWFLAKE refused during a %s ZooKeeper outage shorter than the tolerance: %v", "3s", err)
			}
		}
	})
	time.Sleep(time.Second)

	phase.Store("outage", true)
	zk.Stop()
	time.Sleep(3 * time.Second)
	phase.Delete("outage")
	zk.Start()
	time.Sleep(2 * time.Second)

	// Raise the ensemble's zxid well above what the empty one will have,
	// and let every node see it (a heartbeat's reply carries it): then the
	// wiped ensemble refuses their clients' handshakes, as in production,
	// where a long-lived ensemble has a large zxid.
	bumpZxid(t, zk.Addr(), 2000)
	time.Sleep(2 * time.Second)
	zk.Wipe()
	wiped := time.Now()
	// The nodes must register again in the wiped ensemble by themselves
	// (a new client after refused handshakes, the cluster re-created).
	testnode.WaitFor(t, 60*time.Second, "every node registered again in the wiped ZooKeeper", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := worker.DialZK(ctx, []string{zk.Addr()}, 5*time.Second, "", nil)
		if err != nil {
			return false
		}
		defer conn.Close()
		ws, err := worker.ListWorkers(ctx, conn, "/idgen", cluster, -1)
		held := 0
		for _, w := range ws {
			if w.SlotHeld {
				held++
			}
		}
		return err == nil && held == len(nodes)
	})
	t.Logf("all nodes registered again %v after the wipe", time.Since(wiped).Round(100*time.Millisecond))
	// Past the outage tolerance (8s), SNOWFLAKE serves only on marks
	// written to the new ensemble.
	time.Sleep(time.Until(wiped.Add(10 * time.Second)))
	for _, n := range nodes {
		n.WaitSnowflake(t, 60*time.Second)
	}
	before := ld.count("SNOWFLAKE")
	testnode.WaitFor(t, 30*time.Second, "SNOWFLAKE issuing again after the wipe", func() bool {
		return ld.count("SNOWFLAKE") > before+100
	})
	ld.finish()
	// ORDERED comes back once the barrier's restore hold is over (one
	// member lease plus zksession.RedialWithin after each node noticed
	// the wipe: segment/zkguard restoreHold), 12 s with the defaults.
	for _, n := range nodes {
		testnode.WaitFor(t, 60*time.Second, n.RPCAddr+" /readyz 200 after the wipe", func() bool {
			code, _, err := n.Get(context.Background(), "/readyz")
			return err == nil && code == http.StatusOK
		})
	}
	t.Logf("ids: snowflake %d, unordered %d, ordered %d; errors: %v; snowflake refusals during the short outage: %d",
		ld.count("SNOWFLAKE"), ld.count("UNORDERED"), ld.count("ORDERED"), ld.errs, outageRefusals)
}

// TestE2E_StartingAnswersAtOnce (issue 10): a node that takes a slot in
// a cluster restored less than a lead ago waits one lead before its first
// SNOWFLAKE ID (marks ZooKeeper lost may have gone past the recorded ones;
// a new cluster serves at once, see TestE2E_NewClusterServesAtOnce).
// Meanwhile it answers at once: /readyz is 503 "starting" with the wait remaining and why,
// SNOWFLAKE is a retryable WORKER_UNAVAILABLE whose retry_after_ms is the
// wait, UNORDERED and ORDERED serve, and the strict per-channel probes say
// which channel is ready.
func TestE2E_StartingAnswersAtOnce(t *testing.T) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	// Lead = heartbeat 500ms + outage tolerance 20s + margin 2s: long
	// enough that no busy machine lets the wait end before the checks.
	args := []string{
		"--zk", zkAddr, "--mysql", testdb.New(t, base), "--cluster", fmt.Sprintf("starting%d", rand.Uint32()),
		"--heartbeat-interval", "500ms", "--outage-tolerance", "20s", "--advertise-host", "127.0.0.1",
		"--auto-create-biz", "true", "--properties-dir", t.TempDir()}
	markRestored(t, args) // as `idctl cluster restore` after ZooKeeper lost data
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: args})
	ctx := context.Background()

	code, body, err := n.Get(ctx, "/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, `"state":"starting"`) ||
		!strings.Contains(body, "wait_remaining_ms") || !strings.Contains(body, "high-water mark") {
		t.Fatalf("/readyz while waiting: %d %s %v; want 503 starting with the wait remaining and the reason", code, body, err)
	}
	for ch, want := range map[string]int{"snowflake": 503, "unordered": 200, "ordered": 200} {
		if code, body, _ := n.Get(ctx, "/readyz?channel="+ch); code != want {
			t.Errorf("/readyz?channel=%s while waiting: %d %s; want %d", ch, code, body, want)
		}
	}
	c := n.Client(t)
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "starting", Channel: ch(idl.Channel_SNOWFLAKE), Fallback: new(false),
		Channels: allChannels}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "starting", Channel: ch(idl.Channel_SNOWFLAKE), Count: 1})
	if err == nil {
		t.Fatalf("SNOWFLAKE while waiting served %+v; want a refusal (the business does not allow fallback)", resp)
	}
	var ie *idl.IdgenError
	if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_WORKER_UNAVAILABLE || !ie.Retryable || ie.RetryAfterMs < 1000 {
		t.Fatalf("SNOWFLAKE while waiting: %v; want retryable WORKER_UNAVAILABLE with retry_after_ms = the wait (seconds)", err)
	}
	for _, channel := range []idl.Channel{idl.Channel_UNORDERED, idl.Channel_ORDERED} {
		req := &idl.NextIDsRequest{Biz: "starting", Channel: ch(channel), Count: 3}
		if channel == idl.Channel_ORDERED {
			req.SubKey = str("k")
		}
		if _, err := c.NextIDs(ctx, req); err != nil {
			t.Errorf("%s while SNOWFLAKE waits: %v; want IDs", channel, err)
		}
	}
	if !strings.Contains(n.Logs(), "snowflake waits until the clock passes") {
		t.Errorf("no log line says what the node waits for:\n%s", n.Logs())
	}
	n.WaitSnowflake(t, 60*time.Second)
	if _, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "starting", Channel: ch(idl.Channel_SNOWFLAKE), Count: 1}); err != nil {
		t.Fatalf("SNOWFLAKE after the wait: %v", err)
	}
}

// bumpZxid makes n writes to a scratch znode, so the ensemble's zxid grows
// by n.
func bumpZxid(t *testing.T, addr string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := worker.DialZK(ctx, []string{addr}, 5*time.Second, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Create("/zxid-bump", nil, 0, zkpkg.WorldACL(zkpkg.PermAll)); err != nil && !errors.Is(err, zkpkg.ErrNodeExists) {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := conn.Set("/zxid-bump", []byte("x"), -1); err != nil {
			t.Fatal(err)
		}
	}
}

// markRestored creates the cluster a node started with args joins and
// marks it restored now, as `idctl cluster restore` after ZooKeeper lost
// data: a slot taken in the next lead waits past it.
func markRestored(t *testing.T, args []string) {
	t.Helper()
	testnode.InitCluster(t, args)
	var zkAddr, name string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--zk":
			zkAddr = args[i+1]
		case "--cluster":
			name = args[i+1]
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := worker.DialZK(ctx, strings.Split(zkAddr, ","), worker.DefaultSessionTimeout, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	now, err := cluster.Now(conn, worker.DefaultRoot, name, zkpkg.WorldACL(zkpkg.PermAll))
	if err == nil {
		_, err = cluster.MarkRestored(conn, worker.DefaultRoot, name, now, "test: restored")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestE2E_NewClusterServesAtOnce (issue 17): a cluster created with
// `idctl cluster init` has never had a slot held, so its first node serves
// SNOWFLAKE as soon as it has started, with the default lead (36 s, which a
// cluster created by its first node used to wait). A node that finds no
// cluster refuses to start and names the command.
func TestE2E_NewClusterServesAtOnce(t *testing.T) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	args := []string{"--zk", zkAddr, "--mysql", testdb.New(t, base), "--cluster", fmt.Sprintf("new%d", rand.Uint32()),
		"--advertise-host", "127.0.0.1", "--properties-dir", t.TempDir()}
	refused := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: args, NoClusterInit: true, NoWaitStarted: true, MayExit: true})
	if !refused.Wait(30*time.Second) || refused.ExitCode() == 0 || !strings.Contains(refused.Logs(), "idctl cluster init") {
		t.Fatalf("a node without a cluster: exited %v code %d; want a refusal naming idctl cluster init:\n%s",
			refused.Wait(0), refused.ExitCode(), refused.Logs())
	}

	start := time.Now()
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: args})
	ctx := context.Background()
	c := n.Client(t)
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "fresh", Channel: ch(idl.Channel_SNOWFLAKE), Fallback: new(false)}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "fresh", Channel: ch(idl.Channel_SNOWFLAKE), Count: 1})
	if err != nil {
		t.Fatalf("SNOWFLAKE on a new cluster right after its first node started: %v; want IDs (no lead to wait)", err)
	}
	t.Logf("first SNOWFLAKE ID %d, %v after starting the first node of a new cluster", resp.Ranges[0].First, time.Since(start).Round(time.Millisecond))
}

// workerLines keeps a node log's lines from its worker lease (what a
// failed ZooKeeper test needs to be understood).
func workerLines(logs string) string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "worker") || strings.Contains(l, "ZooKeeper") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
