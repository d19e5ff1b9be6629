// Package scenario holds the fault suite's scenarios: each starts a fresh
// idgen cluster (3 or more real nodes on the suite's ZooKeeper and
// MariaDB), puts it under load, injects its faults, and hands the recorded
// history to the checker.
package scenario

import (
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
	Biz         string            // default "fx"
	StartOrder  []int             // start order (default 0..Nodes-1)
	BeforeStart func(i int) error // called before node i starts
}

// Cluster is a scenario's idgen cluster.
type Cluster struct {
	Name    string
	DSN     string
	Biz     string
	Nodes   []*harness.Node // started ones first, then the spares
	Started int
}

var nameSeq struct {
	sync.Mutex
	n int
}

// NewCluster creates a database, migrates it, starts the nodes, creates the
// business (SNOWFLAKE with fallback) and waits until every node serves
// SNOWFLAKE.
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
	dsn, err := e.Servers.CreateDatabase("faults_" + id)
	if err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	c.DSN = dsn
	if out, err := exec.Command(e.Idctl, "db", "migrate", "--mysql", dsn).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("idctl db migrate: %v\n%s", err, out)
	}
	bin := e.Bin
	if o.FaultInject {
		bin = e.BinFI
	}
	dir := filepath.Join(e.WorkDir, r.Name)
	for i := range o.Nodes + o.Spare {
		name := fmt.Sprintf("n%d", i)
		nd := filepath.Join(dir, name)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return nil, err
		}
		zk := e.Servers.ZKAddr
		if a, ok := o.ZK[i]; ok {
			zk = a
		}
		args := append([]string{"--zk", zk, "--cluster", c.Name, "--mysql", dsn, "--zk-session-timeout", o.Session,
			"--heartbeat-interval", "500ms", "--outage-tolerance", "2s", "--advertise-host", "127.0.0.1",
			"--auto-create-biz", "false", "--properties-dir", nd, "--data-dir", nd}, o.Args...)
		c.Nodes = append(c.Nodes, harness.NewNode(name, bin, dir, args, o.Env[i]))
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
			cl := &harness.Client{Addr: c.Nodes[i].RPCAddr}
			err := cl.CreateBiz(bg(), c.Biz, harness.ChSnowflake, o.Step, true)
			cl.Close()
			if err != nil {
				return nil, fmt.Errorf("CreateBiz: %w", err)
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

// StartLoad starts the standard callers on nodes.
func (r *Run) StartLoad(nodes []*harness.Node) {
	r.from = time.Now()
	r.load = harness.StartLoad(harness.StandardCallers(nodes, r.cluster.Biz, 2), 5*time.Millisecond, r.seed)
}

// AddLoad adds the standard callers of more nodes.
func (r *Run) AddLoad(nodes []*harness.Node) {
	r.load.Add(harness.StandardCallers(nodes, r.cluster.Biz, 2), r.seed+1)
}

// StopLoad stops the load and keeps the history.
func (r *Run) StopLoad() {
	if r.load != nil {
		r.calls = append(r.calls, r.load.Stop()...)
		r.load = nil
		r.to = time.Now()
	}
}

// Proxy starts a TCP proxy to ZooKeeper.
func (r *Run) Proxy() (*harness.Proxy, error) {
	p, err := harness.NewProxy(r.Env.Servers.ZKAddr)
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
