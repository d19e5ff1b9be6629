// Package scenario holds the fault suite's scenarios: each starts a fresh
// idgen cluster (3 or more real nodes on the suite's ZooKeeper and
// MariaDB), puts it under load, injects its faults, and hands the recorded
// history to the checker.
package scenario

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/faults/harness"
	"github.com/idgen/idgen/internal/testnode/zkensemble"
)

// Env is what every scenario shares.
type Env struct {
	Servers *harness.Servers
	Bin     string // idgen
	BinFI   string // idgen built with -tags faultinject
	Idctl   string
	WorkDir string // node logs and failing histories
	Seed    uint64
	Soak    time.Duration
	Out     io.Writer
}

// ClusterOpts shape a scenario's cluster.
type ClusterOpts struct {
	Nodes       int
	Spare       int               // nodes prepared but not started
	FaultInject bool              // nodes run the faultinject build
	Args        []string          // extra flags for every node
	Env         map[int][]string  // extra environment per node index
	ZK          map[int]string    // ZooKeeper address per node index (a proxy)
	Step        int64             // the business's UNORDERED step
	Session     string            // --zk-session-timeout (default 3s)
	Outage      string            // --outage-tolerance (default 2s)
	Biz         string            // default "fx"
	StartOrder  []int             // start order (default 0..Nodes-1)
	BeforeStart func(i int) error // called before node i starts
	// NoFallbackBiz also creates the business "fxnf" (SNOWFLAKE, no
	// fallback) and gives every node a SNOWFLAKE caller on it: the
	// ensemble scenarios count its refusals, which fallback would hide.
	NoFallbackBiz bool
	// MySQLBase is the base DSN ("root@tcp(host:port)/") of the server
	// the cluster's database is created on and the nodes use, instead of
	// the suite's MariaDB ("": the suite's).
	MySQLBase string
	// MySQLNode is a base DSN per node index (a proxy, a member list): the
	// node uses it with the cluster's database appended.
	MySQLNode map[int]string
	// NoMySQL: the nodes run without --mysql (businesses in ZooKeeper).
	// The businesses allow SNOWFLAKE only, without fallback (what such a
	// node accepts), and the scenario's load is SNOWFLAKE only
	// (Run.sfOnly).
	NoMySQL bool
}

// setFault sets the faultinject switch sw ("IDGEN_FAULT_...=value") in the
// environment of the given nodes (indexes), after what they have, and
// runs the cluster on the faultinject build: only that build reads the
// switches, so a switch on the normal build would test nothing.
func (o *ClusterOpts) setFault(sw string, nodes ...int) {
	o.FaultInject = true
	if o.Env == nil {
		o.Env = map[int][]string{}
	}
	for _, i := range nodes {
		o.Env[i] = append(o.Env[i], sw)
	}
}

// firstNodes returns the node indexes 0..n-1 (ClusterOpts.setFault on
// every node of an n-node cluster).
func firstNodes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// Cluster is a scenario's idgen cluster.
type Cluster struct {
	Name    string
	DSN     string
	Biz     string
	NFBiz   string          // the business without fallback ("" unless NoFallbackBiz)
	Nodes   []*harness.Node // started ones first, then the spares
	Started int
	// AdminToken is the admin token every node of the cluster shares
	// (one --admin-token-file): admin RPCs need it.
	AdminToken string
}

var nameSeq struct {
	sync.Mutex
	n int
}

// NewCluster creates a database, migrates it, creates the cluster in
// ZooKeeper (idctl cluster init, with the nodes' bit split: a node refuses
// to start in a cluster nobody created), starts the nodes, creates the
// business (SNOWFLAKE with fallback) and waits until every node serves
// SNOWFLAKE. The nodes use the scenario's ensemble when it started one
// (StartEnsemble), else the suite's single ZooKeeper server.
func (r *Run) NewCluster(o ClusterOpts) (*Cluster, error) {
	e := r.Env
	nameSeq.Lock()
	nameSeq.n++
	id := fmt.Sprintf("%s_%d_%d", strings.ReplaceAll(r.Name, "-", "_"), nameSeq.n, rand.Uint32()%100000)
	nameSeq.Unlock()
	c := &Cluster{Name: "f" + id, Biz: o.Biz}
	if c.Biz == "" {
		c.Biz = "fx"
	}
	if o.Step == 0 {
		o.Step = 1000
	}
	if o.Session == "" {
		o.Session = "3s"
	}
	if o.Outage == "" {
		o.Outage = "2s"
	}
	if o.NoFallbackBiz {
		c.NFBiz = "fxnf"
	}
	var dsn string
	var err error
	if o.NoMySQL {
		r.sfOnly = true
	} else if o.MySQLBase != "" {
		dsn, err = harness.CreateDatabaseAt(o.MySQLBase, "faults_"+id)
	} else {
		dsn, err = e.Servers.CreateDatabase("faults_" + id)
	}
	if err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	c.DSN = dsn
	if dsn != "" {
		if out, err := exec.Command(e.Idctl, "db", "migrate", "--mysql", dsn).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("idctl db migrate: %v\n%s", err, out)
		}
	}
	if err := r.initCluster(c.Name, o.Args); err != nil {
		return nil, err
	}
	bin := e.Bin
	if o.FaultInject {
		bin = e.BinFI
	}
	dir := filepath.Join(e.WorkDir, r.Name)
	tokenArgs, err := c.adminTokenArgs(dir, o.Args)
	if err != nil {
		return nil, err
	}
	for i := range o.Nodes + o.Spare {
		name := fmt.Sprintf("n%d", i)
		nd := filepath.Join(dir, name)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return nil, err
		}
		zk := r.ZKConnect()
		if a, ok := o.ZK[i]; ok {
			zk = a
		}
		mysql := dsn
		if b, ok := o.MySQLNode[i]; ok {
			mysql = b + "faults_" + id
		}
		var mysqlArgs []string
		if dsn != "" {
			mysqlArgs = []string{"--mysql", mysql}
		} else {
			// No database (ClusterOpts.NoMySQL): a node refuses one ZooKeeper
			// server without a witness unless told to accept it; the
			// scenarios that run so are the documented limit of that
			// configuration (neg-zk-restore-fresh-first-no-mysql).
			mysqlArgs = []string{"--zk-single-server-unwitnessed"}
		}
		args := append([]string{"--zk", zk, "--cluster", c.Name}, mysqlArgs...)
		args = append(args, "--zk-session-timeout", o.Session,
			"--heartbeat-interval", "500ms", "--outage-tolerance", o.Outage, "--advertise-host", "127.0.0.1",
			"--auto-create-biz", "false", "--properties-dir", nd, "--data-dir", nd)
		args = append(args, append(tokenArgs, o.Args...)...)
		n, err := harness.NewNode(name, bin, dir, args, o.Env[i])
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	r.cluster = c
	order := o.StartOrder
	if order == nil {
		for i := range o.Nodes {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if o.BeforeStart != nil {
			if err := o.BeforeStart(i); err != nil {
				return nil, err
			}
		}
		if err := c.Nodes[i].Start(60 * time.Second); err != nil {
			return nil, err
		}
		if i == order[0] {
			if err := c.CreateBiz(c.Nodes[i], o.Step, !o.NoMySQL); err != nil {
				return nil, err
			}
		}
	}
	c.Started = o.Nodes
	for _, i := range order {
		if err := c.Nodes[i].WaitSnowflake(60 * time.Second); err != nil {
			return nil, err
		}
	}
	r.Logf("cluster %s: %d nodes serving (database %s)", c.Name, o.Nodes, "faults_"+id)
	return c, nil
}

// CreateBiz creates the cluster's businesses through n (SNOWFLAKE; Biz
// with fallback when fallback is set, NFBiz without; without fallback
// they allow SNOWFLAKE alone, as a node without MySQL requires).
func (c *Cluster) CreateBiz(n *harness.Node, step int64, fallback bool) error {
	cl := &harness.Client{Addr: n.RPCAddr, AdminToken: c.AdminToken}
	defer cl.Close()
	channels := []int32{harness.ChUnordered, harness.ChOrdered, harness.ChSnowflake}
	if !fallback {
		// Also what a node without MySQL accepts: SNOWFLAKE alone.
		channels = []int32{harness.ChSnowflake}
	}
	err := cl.CreateBizChannels(bg(), c.Biz, harness.ChSnowflake, step, fallback, channels)
	if err == nil && c.NFBiz != "" {
		err = cl.CreateBizChannels(bg(), c.NFBiz, harness.ChSnowflake, step, false, channels)
	}
	if err != nil {
		return fmt.Errorf("CreateBiz on %s: %w", n.Name, err)
	}
	return nil
}

// adminTokenArgs gives the cluster one admin token, written to a file
// (mode 0600) in dir that every node reads through --admin-token-file, and
// returns that flag; nothing when the scenario's flags set a token file of
// their own (c.AdminToken is then read from it).
func (c *Cluster) adminTokenArgs(dir string, args []string) ([]string, error) {
	for i, a := range args {
		if a == "--admin-token-file" && i+1 < len(args) {
			b, err := os.ReadFile(args[i+1])
			if err != nil {
				return nil, fmt.Errorf("admin token: %w", err)
			}
			c.AdminToken = strings.TrimSpace(string(b))
			return nil, nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	raw := make([]byte, 32)
	if _, err := crand.Read(raw); err != nil {
		return nil, err
	}
	c.AdminToken = base64.RawURLEncoding.EncodeToString(raw)
	path := filepath.Join(dir, c.Name+".admin.token")
	if err := os.WriteFile(path, []byte(c.AdminToken+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	return []string{"--admin-token-file", path}, nil
}

// initCluster runs `idctl cluster init` for a new cluster on the
// scenario's ZooKeeper, with the bit split found in the nodes' flags
// (--idc-bits, --node-bits), so the nodes' settings match the cluster's.
func (r *Run) initCluster(name string, nodeArgs []string) error {
	args := []string{"cluster", "init", "--zk", r.ZKConnect(), "--cluster", name}
	for i := 0; i+1 < len(nodeArgs); i++ {
		if f := nodeArgs[i]; f == "--idc-bits" || f == "--node-bits" {
			args = append(args, f, nodeArgs[i+1])
			i++
		}
	}
	ctx, cancel := context.WithTimeout(bg(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, r.Env.Idctl, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("idctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Active returns the started nodes.
func (c *Cluster) Active() []*harness.Node { return c.Nodes[:c.Started] }

// Run is one scenario's run.
type Run struct {
	Env      *Env
	Name     string
	Negative bool
	cluster  *Cluster
	load     *harness.Load
	proxies  []*harness.Proxy
	from, to time.Time
	calls    []checker.Call
	notes    []string
	seed     uint64
	ens      *zkensemble.Ensemble
	// negOrder: this control also fails by order violations (not only by
	// duplicates); violations are the scenario's own findings.
	negOrder bool
	// negViolation: this control also fails by the scenario's own
	// violations (a gap bound; the holes of issue 29).
	negViolation bool
	violations   []string
	// keepHistory: write the history even when the scenario passes (it
	// found something worth a look).
	keepHistory bool
	// sfOnly: the load is SNOWFLAKE only (ClusterOpts.NoMySQL).
	sfOnly bool
}

// Logf prints a progress line.
func (r *Run) Logf(format string, a ...any) {
	fmt.Fprintf(r.Env.Out, "    %s %-14s %s\n", time.Now().UTC().Format("15:04:05.000"), r.Name, fmt.Sprintf(format, a...))
}

// Note adds a remark to the scenario's summary line.
func (r *Run) Note(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	r.notes = append(r.notes, s)
	r.Logf("%s", s)
}

// callers are the standard callers of nodes, plus a SNOWFLAKE caller per
// node on the business without fallback when the cluster has one.
func (r *Run) callers(nodes []*harness.Node) []harness.Caller {
	if r.sfOnly {
		cs := harness.SnowflakeCallers(nodes, r.cluster.Biz)
		for i := range cs {
			cs[i].Name = cs[i].Node.Name + "/sf"
		}
		if r.cluster.NFBiz != "" {
			cs = append(cs, harness.SnowflakeCallers(nodes, r.cluster.NFBiz)...)
		}
		return cs
	}
	cs := harness.StandardCallers(nodes, r.cluster.Biz, 2)
	if r.cluster.NFBiz != "" {
		cs = append(cs, harness.SnowflakeCallers(nodes, r.cluster.NFBiz)...)
	}
	return cs
}

// StartLoad starts the standard callers on nodes.
func (r *Run) StartLoad(nodes []*harness.Node) {
	r.from = time.Now()
	r.load = harness.StartLoad(r.callers(nodes), 5*time.Millisecond, r.seed)
}

// AddLoad adds the standard callers of more nodes.
func (r *Run) AddLoad(nodes []*harness.Node) {
	r.load.Add(r.callers(nodes), r.seed+1)
}

// StartEnsemble starts a three-server ZooKeeper ensemble for this scenario
// (in its work dir, stopped by cleanup); clusters created afterwards use it
// instead of the suite's single server.
func (r *Run) StartEnsemble() (*zkensemble.Ensemble, error) { return r.startZK(3) }

// StartSingleZK starts a one-server ZooKeeper (standalone) of this
// scenario's own, in its work dir, that clusters created afterwards use:
// a scenario that restores its data dir leaves the suite's server alone.
func (r *Run) StartSingleZK() (*zkensemble.Ensemble, error) { return r.startZK(1) }

func (r *Run) startZK(n int) (*zkensemble.Ensemble, error) {
	t := time.Now()
	z, err := harness.StartEnsemble(filepath.Join(r.Env.WorkDir, r.Name, "zk"), n)
	if err != nil {
		return nil, fmt.Errorf("ZooKeeper (%d servers): %w", n, err)
	}
	r.ens = z
	r.Logf("ZooKeeper (%d servers) %s serving after %v, leader zk%d", n, z.Connect(), time.Since(t).Round(100*time.Millisecond), z.Leader()+1)
	return z, nil
}

// ZKConnect returns the connect string of the scenario's ZooKeeper: its
// ensemble, or the suite's single server.
func (r *Run) ZKConnect() string {
	if r.ens != nil {
		return r.ens.Connect()
	}
	return r.Env.Servers.ZKAddr
}

// StopLoad stops the load and keeps the history.
func (r *Run) StopLoad() {
	if r.load != nil {
		r.calls = append(r.calls, r.load.Stop()...)
		r.load = nil
		r.to = time.Now()
	}
}

// Proxy starts a TCP proxy to the suite's single ZooKeeper server.
func (r *Run) Proxy() (*harness.Proxy, error) { return r.ProxyTo(r.Env.Servers.ZKAddr) }

// ProxyTo starts a TCP proxy to addr (closed by cleanup).
func (r *Run) ProxyTo(addr string) (*harness.Proxy, error) {
	p, err := harness.NewProxy(addr)
	if err == nil {
		r.proxies = append(r.proxies, p)
	}
	return p, err
}

// Sleep waits d under load.
func (r *Run) Sleep(d time.Duration) { time.Sleep(d) }

// WaitServing waits until the node answered a call successfully after t
// (any channel), at most d.
func (r *Run) WaitServing(n *harness.Node, d time.Duration) error {
	t := time.Now()
	deadline := t.Add(d)
	for time.Now().Before(deadline) {
		if r.load.OKSince(n.Name, t) > 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s answered no call within %v", n.Name, d)
}

// cleanup stops everything the run started and brings the servers back to
// their normal state.
func (r *Run) cleanup() {
	r.StopLoad()
	if r.cluster != nil {
		var wg sync.WaitGroup
		for _, n := range r.cluster.Nodes {
			wg.Add(1)
			go func() { defer wg.Done(); n.Kill() }()
		}
		wg.Wait()
	}
	for _, p := range r.proxies {
		p.Close()
	}
	if r.ens != nil {
		r.ens.Close()
	}
	s := r.Env.Servers
	if !reachable(s.ZKAddr) {
		if err := s.ZKStart(); err != nil {
			r.Logf("restarting ZooKeeper: %v", err)
		}
	}
	if s.MySQLUnsafe() || !reachable(fmt.Sprintf("127.0.0.1:%d", s.MySQLPort)) {
		s.MySQLStop()
		if err := s.MySQLStart(false); err != nil {
			r.Logf("restarting MariaDB: %v", err)
		}
	}
}
