package resolver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/discovery"
	"github.com/cloudwego/kitex/pkg/loadbalance"
	"github.com/cloudwego/kitex/pkg/loadbalance/lbcache"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/internal/inproc"
	"github.com/idgen/idgen/internal/wait"
	"github.com/idgen/idgen/internal/zkproxy"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/resolver"
	"github.com/idgen/idgen/server"
	"github.com/idgen/idgen/worker"
)

// These tests run against the real ZooKeeper that ./build.sh test starts
// (IDGEN_TEST_ZK). Each uses its own cluster under testRoot.

const testRoot = "/idgen-test-resolver"

// nodeSession is the session timeout of the members the tests register:
// how long ZooKeeper keeps a crashed member's znode.
const nodeSession = 2 * time.Second

func testZK(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("IDGEN_TEST_ZK")
	if addr == "" {
		t.Skip("IDGEN_TEST_ZK not set: these tests need a real ZooKeeper; run ./build.sh test, or source .testenv")
	}
	return addr
}

func uniqueCluster(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

// initCluster creates the cluster as `idctl cluster init` does.
func initCluster(t *testing.T, zkAddr, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := worker.DialZK(ctx, strings.Split(zkAddr, ","), 10*time.Second, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := cluster.Init(c, testRoot, name, cluster.Settings{EpochMs: worker.DefaultEpochMs,
		IDCBits: worker.DefaultIDCBits, NodeBits: worker.DefaultNodeBits}, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("cluster init: %v", err)
	}
}

// nopHolder takes the slot and issues nothing.
type nopHolder struct{}

func (nopHolder) Acquired(worker.Slot) {}
func (nopHolder) Extended(int64)       {}
func (nopHolder) Fenced(error)         {}
func (nopHolder) LastUsed() int64      { return 0 }

// register registers a member the way a node does (worker.Register: slot
// claim, then the member znode) with port as its RPC port, talking to
// ZooKeeper at servers.
func register(t *testing.T, servers, name string, idc, port int) *worker.ZKLease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := worker.Register(ctx, worker.Config{
		Servers: []string{servers}, Root: testRoot, Cluster: name, IDC: idc,
		Host: "127.0.0.1", Port: port, PropertiesDir: t.TempDir(),
		SessionTimeout: nodeSession, HeartbeatInterval: 200 * time.Millisecond,
		HighWaterMargin: 200 * time.Millisecond, OutageTolerance: 300 * time.Millisecond,
		ConnectTimeout: 10 * time.Second, Holder: nopHolder{}, Version: "resolver-test",
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
	})
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = l.Close(ctx) // a cut-off member cannot reach ZooKeeper: no error check
	})
	return l
}

func newResolver(t *testing.T, cfg resolver.Config) *resolver.Resolver {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	r, err := resolver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func addrs(res discovery.Result) []string {
	var out []string
	for _, in := range res.Instances {
		out = append(out, in.Address().String())
	}
	return out
}

func resolved(t *testing.T, r *resolver.Resolver) ([]string, error) {
	t.Helper()
	res, err := r.Resolve(context.Background(), r.Target(context.Background(), nil))
	return addrs(res), err
}

// collected returns r.CacheOptions() with a short ExpireInterval, and
// makes the test's end wait, before r closes, until Kitex has collected
// the balancers over r. Kitex has no Close for a balancer: it refreshes
// every RefreshInterval until unused for two ExpireIntervals (15 s each by
// default), and each refresh of a closed resolver logged a warning, into
// the next tests' output and after the test run's last line (issue 32).
func collected(t *testing.T, r *resolver.Resolver) *lbcache.Options {
	t.Helper()
	opts := r.CacheOptions()
	opts.ExpireInterval = time.Second // collected 1-2 s after its last use
	target := r.Target(context.Background(), nil)
	t.Cleanup(func() { // before newResolver's: cleanups run last first
		waitFor(t, "Kitex's balancers over the resolver collected", 10*time.Second, func() bool {
			return !balancerCached(target)
		})
	})
	return opts
}

// balancerCached reports whether a Kitex balancer of target is in Kitex's
// process-wide cache (lbcache.Dump: factory key -> target -> instances).
func balancerCached(target string) bool {
	dump, _ := lbcache.Dump().(map[string]any)
	for _, routes := range dump {
		if m, ok := routes.(map[string]any); ok {
			if _, ok := m[target]; ok {
				return true
			}
		}
	}
	return false
}

// waitFor polls cond every 20ms until it holds or d has passed.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// TestResolveMembersAndLeave: Resolve lists the members that registered
// as nodes do, with their tags; a member whose process is cut off (its
// session left to expire) is gone from Resolve within its session
// timeout (plus ZooKeeper's expiry tick and slack), and from a Kitex
// balancer built with CacheOptions one RefreshInterval later at most.
func TestResolveMembersAndLeave(t *testing.T) {
	zkAddr := testZK(t)
	name := uniqueCluster(t)
	initCluster(t, zkAddr, name)

	register(t, zkAddr, name, 0, 7101)
	proxy := zkproxy.New(t, zkAddr)
	register(t, proxy.Addr(), name, 1, 7102)

	r := newResolver(t, resolver.Config{ZK: []string{zkAddr}, ZKRoot: testRoot, Cluster: name})
	want := "[127.0.0.1:7101 127.0.0.1:7102]"
	waitFor(t, "both members resolved", 10*time.Second, func() bool {
		got, err := resolved(t, r)
		return err == nil && fmt.Sprint(got) == want
	})
	res, err := r.Resolve(context.Background(), r.Target(context.Background(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cacheable || res.CacheKey != "/idgen-test-resolver/"+name {
		t.Errorf("result cacheable %v key %q", res.Cacheable, res.CacheKey)
	}
	for i, in := range res.Instances {
		if in.Weight() != discovery.DefaultWeight || in.Address().Network() != "tcp" {
			t.Errorf("instance %v weight %d network %s", in.Address(), in.Weight(), in.Address().Network())
		}
		if idc, _ := in.Tag(resolver.TagIDC); idc != strconv.Itoa(i) {
			t.Errorf("instance %v idc tag %q, want %d", in.Address(), idc, i)
		}
		if c, _ := in.Tag(resolver.TagCluster); c != name {
			t.Errorf("instance %v cluster tag %q", in.Address(), c)
		}
		if v, _ := in.Tag(resolver.TagVersion); v != "resolver-test" {
			t.Errorf("instance %v version tag %q", in.Address(), v)
		}
		if m, _ := in.Tag(resolver.TagMember); !strings.HasPrefix(m, "m-") {
			t.Errorf("instance %v member tag %q", in.Address(), m)
		}
	}

	// A Kitex balancer over the resolver, as a client with
	// WithLoadBalancer(lb, r.CacheOptions()) builds it.
	opts := r.CacheOptions()
	if opts.RefreshInterval != resolver.DefaultRefreshInterval || !opts.Cacheable {
		t.Fatalf("cache options %+v", opts)
	}
	bf := lbcache.NewBalancerFactory(r, loadbalance.NewWeightedBalancer(), *collected(t, r))
	bl, err := bf.Get(context.Background(), rpcinfo.NewEndpointInfo("idgen", "Clock", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	// balanced is what the balancer holds; it picks, as a client's call
	// does, which keeps the balancer in Kitex's cache (collected).
	balanced := func() string {
		_ = bl.GetPicker()
		res, _ := bl.GetResult()
		return fmt.Sprint(addrs(res))
	}
	if got := balanced(); got != want {
		t.Fatalf("balancer has %s, want %s", got, want)
	}

	// The second member's process is cut off from ZooKeeper: no close of
	// its session, which ZooKeeper expires after nodeSession.
	proxy.Block()
	bound := 3 * nodeSession // expiry (nodeSession + a tick) and slack for a loaded machine
	took := waitFor(t, "cut-off member gone from Resolve", bound, func() bool {
		balanced() // a client calling meanwhile
		got, err := resolved(t, r)
		return err == nil && fmt.Sprint(got) == "[127.0.0.1:7101]"
	})
	t.Logf("member gone from Resolve %v after its process was cut off (session timeout %v)", took, nodeSession)
	took2 := waitFor(t, "cut-off member gone from the Kitex balancer", opts.RefreshInterval+time.Second, func() bool {
		return balanced() == "[127.0.0.1:7101]"
	})
	t.Logf("and from the balancer %v later (RefreshInterval %v)", took2, opts.RefreshInterval)
	if r.Stale() {
		t.Error("resolver reports stale with a live session")
	}
}

// TestResolveNeverSeenFails: a resolver of a cluster that does not exist
// yet fails Resolve with ErrNoMembers (not an empty list), then answers
// once the cluster is created and a member registers.
func TestResolveNeverSeenFails(t *testing.T) {
	zkAddr := testZK(t)
	name := uniqueCluster(t)
	r := newResolver(t, resolver.Config{ZK: []string{zkAddr}, ZKRoot: testRoot, Cluster: name})
	if got, err := resolved(t, r); !errors.Is(err, resolver.ErrNoMembers) {
		t.Fatalf("Resolve of an absent cluster: %v, %v; want ErrNoMembers", got, err)
	}
	initCluster(t, zkAddr, name)
	register(t, zkAddr, name, 0, 7201)
	waitFor(t, "member resolved after the cluster appeared", 10*time.Second, func() bool {
		got, err := resolved(t, r)
		return err == nil && fmt.Sprint(got) == "[127.0.0.1:7201]"
	})
}

// TestResolveKeepsMembersWithoutZooKeeper: cut off from ZooKeeper, the
// resolver keeps answering with the last known members (as the idgen
// client does) and reports them stale once it has had no session for its
// session timeout; when ZooKeeper is back (a new session, its old one
// expired) it lists afresh, sees a leave that happened meanwhile and is
// current again.
func TestResolveKeepsMembersWithoutZooKeeper(t *testing.T) {
	zkAddr := testZK(t)
	name := uniqueCluster(t)
	initCluster(t, zkAddr, name)
	register(t, zkAddr, name, 0, 7301)
	b := register(t, zkAddr, name, 0, 7302)

	proxy := zkproxy.New(t, zkAddr)
	const session = 2 * time.Second
	r := newResolver(t, resolver.Config{ZK: []string{proxy.Addr()}, ZKRoot: testRoot, Cluster: name,
		ZKSessionTimeout: session})
	want := "[127.0.0.1:7301 127.0.0.1:7302]"
	waitFor(t, "both members resolved", 10*time.Second, func() bool {
		got, err := resolved(t, r)
		return err == nil && fmt.Sprint(got) == want
	})

	proxy.Block()
	waitFor(t, "stale after the session timeout", 3*session, r.Stale)
	if got, err := resolved(t, r); err != nil || fmt.Sprint(got) != want {
		t.Fatalf("stale Resolve: %v, %v; want the last known %s", got, err, want)
	}
	// A member leaves while the resolver cannot see it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Unblock()
	waitFor(t, "current again, without the member that left", 10*session, func() bool {
		got, err := resolved(t, r)
		return !r.Stale() && err == nil && fmt.Sprint(got) == "[127.0.0.1:7301]"
	})
}

// TestKitexClientCallsNodeThroughResolver: a plain Kitex client of the
// idgen service, with only the resolver to find nodes, calls a real idgen
// node (server.Run in-process, --zk) that requires a client token.
func TestKitexClientCallsNodeThroughResolver(t *testing.T) {
	zkAddr := testZK(t)
	name := uniqueCluster(t)
	initCluster(t, zkAddr, name)

	dir := t.TempDir()
	token := "resolver-test-client-token-0123456789"
	tokenFile := filepath.Join(dir, "client.token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	n := inproc.Start(t, server.Options{Version: "resolver-test"}, "--zk", zkAddr, "--zk-single-server-unwitnessed", "--zk-root", testRoot,
		"--cluster", name, "--data-dir", filepath.Join(dir, "data"), "--client-token-file", tokenFile)

	r := newResolver(t, resolver.Config{ZK: []string{zkAddr}, ZKRoot: testRoot, Cluster: name})
	cli := inproc.NewClient(t, client.WithResolver(r),
		client.WithLoadBalancer(loadbalance.NewWeightedBalancer(), collected(t, r)))
	var resp *idl.ClockResponse
	// Fails while the node has not registered (Resolve: no member yet) or
	// is still starting.
	wait.OK(t, 60*time.Second, "Clock through the resolver", func() error {
		var err error
		resp, err = cli.Clock(context.Background(), &idl.ClockRequest{Token: &token})
		if err == nil && resp.Worker < 0 {
			err = fmt.Errorf("answered %v: no worker yet", resp)
		}
		return err
	})
	if resp.Cluster != name {
		t.Errorf("answered by cluster %q, want %q", resp.Cluster, name)
	}
	ms := r.Members()
	if len(ms) != 1 || ms[0].Addr() != n.RPC || ms[0].Worker != int(resp.Worker) {
		t.Errorf("members %+v; want the node at %s with worker %d", ms, n.RPC, resp.Worker)
	}
}
