package scenario

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/faults/harness"
)

// The replication scenarios (issue #18, "Replicated MySQL") run the
// cluster on MariaDB topologies started for the scenario rather than on
// the suite's single server: a primary P with a replica R behind a TCP
// proxy that plays the virtual IP (failover-async, failover-semisync,
// neg-failover-guard), a three-member Galera cluster (galera), and the
// suite's server reached by one node through a proxy that partitions it
// (mysql-partition).

// replStep is the UNORDERED step of the failover scenarios: small, so that
// the nodes reserve segments often and a lost reservation is soon handed
// out again.
const replStep = 50

// replLag is how long the replica lags (its SQL thread stopped) before the
// primary is killed: every reservation of that time is in the replica's
// relay log and, after a lossy promotion, nowhere.
const replLag = 6 * time.Second

// replPair is a primary and its replica behind the VIP proxy.
type replPair struct {
	P, R *harness.MariaDB
	VIP  *harness.Proxy
}

func (rp *replPair) close() {
	var wg sync.WaitGroup
	for _, m := range []*harness.MariaDB{rp.P, rp.R} {
		if m != nil {
			wg.Add(1)
			go func() { defer wg.Done(); m.Close() }()
		}
	}
	wg.Wait()
}

// startPair starts P and R from one fresh data dir (R replicates P's
// binary log from its start, GTID, read-only) and the VIP proxy in front
// of P. semi: semi-synchronous replication, AFTER_SYNC.
func startPair(r *Run, semi bool) (*replPair, error) {
	dir := filepath.Join(r.Env.WorkDir, r.Name)
	tmpl := filepath.Join(dir, "mariadb-template")
	rp := &replPair{}
	t := time.Now()
	if err := harness.InstallDataDir(tmpl); err != nil {
		return rp, err
	}
	defer os.RemoveAll(tmpl)
	pf, rf := harness.ReplicationFlags(1), harness.ReplicationFlags(2)
	if semi {
		pf = append(pf, harness.SemiSyncPrimaryFlags...)
		rf = append(rf, harness.SemiSyncReplicaFlags...)
	}
	var err error
	if rp.P, err = harness.NewMariaDB(r.Name+"-P", r.Env.Servers.Mariadbd, filepath.Join(dir, "primary"), tmpl, pf); err != nil {
		return rp, err
	}
	if rp.R, err = harness.NewMariaDB(r.Name+"-R", r.Env.Servers.Mariadbd, filepath.Join(dir, "replica"), tmpl, rf); err != nil {
		return rp, err
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, m := range []*harness.MariaDB{rp.P, rp.R} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = m.Start(60 * time.Second) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return rp, err
	}
	if err := rp.R.ReplicateFrom(rp.P, 30*time.Second); err != nil {
		return rp, err
	}
	mode := "asynchronous"
	if semi {
		// The primary counts the replica as a semi-sync client once its IO
		// thread connected with the slave side enabled.
		deadline := time.Now().Add(15 * time.Second)
		var clients, status string
		for time.Now().Before(deadline) {
			clients, _ = rp.P.Status("Rpl_semi_sync_master_clients")
			status, _ = rp.P.Status("Rpl_semi_sync_master_status")
			if clients == "1" && status == "ON" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if clients != "1" || status != "ON" {
			return rp, fmt.Errorf("semi-sync not active on %s after 15 s: Rpl_semi_sync_master_clients=%q, Rpl_semi_sync_master_status=%q",
				rp.P.Name, clients, status)
		}
		mode = "semi-synchronous (AFTER_SYNC)"
	}
	if rp.VIP, err = harness.NewTCPProxy(rp.P.Addr()); err != nil {
		return rp, err
	}
	r.proxies = append(r.proxies, rp.VIP)
	r.Logf("primary %s, %s replica %s, VIP %s: ready after %v", rp.P.Addr(), mode, rp.R.Addr(), rp.VIP.Addr,
		time.Since(t).Round(100*time.Millisecond))
	return rp, nil
}

// failover: P and R, the cluster on the VIP, R made to lag under load
// (its SQL thread stopped; the IO thread keeps receiving), P SIGKILLed, R
// promoted and the VIP moved to it. lossless: the relay log is applied
// before the promotion (semi-sync: it holds every acknowledged commit);
// else R is promoted as it is and the lag's reservations are lost. neg:
// the nodes' cross-node guard is switched off (faultinject build).
func failover(semi, lossless, neg bool) func(*Run) error {
	return func(r *Run) error {
		rp, err := startPair(r, semi)
		defer rp.close()
		if err != nil {
			return err
		}
		o := ClusterOpts{Step: replStep, MySQLBase: "root@tcp(" + rp.VIP.Addr + ")/"}
		if neg {
			o.setFault("IDGEN_FAULT_NO_REPLICATION_GUARD=1", firstNodes(3)...)
		}
		c, err := std(r, o)
		if err != nil {
			return err
		}
		if err := rp.R.WaitReplicated(rp.P, 30*time.Second); err != nil {
			return err
		}
		r.StartLoad(c.Active())
		r.Sleep(3 * time.Second)
		if err := rp.R.Exec("STOP SLAVE SQL_THREAD"); err != nil {
			return err
		}
		r.Note("replica lags: SQL thread stopped %v into the load", time.Since(r.from).Round(100*time.Millisecond))
		r.Sleep(replLag)
		pPos, _ := rp.P.Var("gtid_binlog_pos")
		tKill := time.Now()
		rp.P.Kill()
		st, err := rp.R.SlaveStatus()
		if err != nil {
			return err
		}
		applied, _ := rp.R.Var("gtid_slave_pos")
		received := st["Gtid_IO_Pos"]
		how := "lossy: relay log discarded"
		if lossless {
			if applied, err = rp.R.ApplyRelayLog(20 * time.Second); err != nil {
				return err
			}
			how = "lossless: relay log applied first"
		}
		if err := rp.R.Promote(); err != nil {
			return err
		}
		rp.VIP.SwitchTarget(rp.R.Addr())
		fo := time.Since(tKill)
		lost := harness.GTIDSeq(received) - harness.GTIDSeq(applied)
		r.Note("primary SIGKILLed (binlog at about %s); replica had received %s, promoted at %s (%s, %d transactions lost); VIP switched: failover %v",
			pPos, received, applied, how, lost, fo.Round(time.Millisecond))
		r.Sleep(20 * time.Second)
		r.StopLoad()
		r.Note("%s", gapsNote(r.calls, r.from, r.to, ""))
		r.Note("outage per channel vs failover %v: %s", fo.Round(time.Millisecond), gapsVersus(r.calls, tKill, r.to, fo))
		r.Note("node log lines since the kill on regressions, repairs, raised rows: %s", logMatches(c.Active(), tKill, "regress", "repair", "raise"))
		return nil
	}
}

// channelGaps checks calls (of node, "" for all) answered in [from, to]
// and returns the longest gap per channel.
func channelGaps(calls []checker.Call, node string, from, to time.Time) *checker.Report {
	var sel []checker.Call
	for i := range calls {
		c := &calls[i]
		if (node == "" || c.Node == node) && !c.Start.Before(from) {
			sel = append(sel, *c)
		}
	}
	return checker.Check(sel, checker.Options{Layout: checker.DefaultLayout, From: from, To: to})
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// gapsNote: "longest gap UN x s, ORD y s, SF z s (no fallback w s)".
func gapsNote(calls []checker.Call, from, to time.Time, node string) string {
	rep := channelGaps(calls, node, from, to)
	who := "longest gap"
	if node != "" {
		who = node + "'s longest gap"
	}
	return fmt.Sprintf("%s: UN %s, ORD %s, SF %s (no fallback %s)", who,
		secs(rep.Gap("channel/"+checker.Unordered).Len), secs(rep.Gap("channel/"+checker.Ordered).Len),
		secs(rep.Gap("channel/"+checker.Snowflake).Len), secs(rep.Gap("channel/SNOWFLAKE-no-fallback").Len))
}

// gapsVersus compares each segment channel's longest gap from the kill on
// with the failover's length.
func gapsVersus(calls []checker.Call, from, to time.Time, fo time.Duration) string {
	rep := channelGaps(calls, "", from.Add(-5*time.Second), to)
	var parts []string
	for _, ch := range []string{checker.Unordered, checker.Ordered} {
		g := rep.Gap("channel/" + ch).Len
		verdict := "no longer than the failover"
		if g > fo {
			verdict = fmt.Sprintf("%s longer", secs(g-fo))
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s)", ch, secs(g), verdict))
	}
	return strings.Join(parts, ", ")
}

// logMatches counts the node log lines logged at or after since that
// contain any of words (case-insensitive), and quotes the last one.
func logMatches(nodes []*harness.Node, since time.Time, words ...string) string {
	var parts []string
	last := ""
	for _, n := range nodes {
		f, err := os.Open(n.LogPath)
		if err != nil {
			continue
		}
		cnt := 0
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if !since.IsZero() {
				f := strings.Fields(sc.Text())
				if len(f) == 0 {
					continue
				}
				if t, err := time.Parse(time.RFC3339Nano, f[0]); err != nil || t.Before(since) {
					continue
				}
			}
			l := strings.ToLower(sc.Text())
			for _, w := range words {
				if strings.Contains(l, w) {
					cnt++
					last = sc.Text()
					break
				}
			}
		}
		f.Close()
		parts = append(parts, fmt.Sprintf("%s %d", n.Name, cnt))
	}
	s := strings.Join(parts, ", ")
	if last != "" {
		if len(last) > 300 {
			last = last[:300] + "..."
		}
		s += "; last: " + last
	}
	return s
}

// hotCallers are the standard callers with three ORDERED keys, plus on
// every node a second caller on each ORDERED key and a second UNORDERED
// caller: the same rows written through every member at once, which is
// where Galera's certification conflicts happen.
func hotCallers(r *Run, nodes []*harness.Node) []harness.Caller {
	cs := harness.StandardCallers(nodes, r.cluster.Biz, 3)
	for _, n := range nodes {
		cs = append(cs, harness.Caller{Name: n.Name + "/un2", Node: n, Biz: r.cluster.Biz, Channel: harness.ChUnordered, MinCount: 1, MaxCount: 64})
		for k := range 3 {
			cs = append(cs, harness.Caller{Name: fmt.Sprintf("%s/ord%db", n.Name, k), Node: n, Biz: r.cluster.Biz,
				Channel: harness.ChOrdered, SubKey: fmt.Sprintf("k%d", k), MinCount: 1, MaxCount: 4})
		}
	}
	return cs
}

// galera: three Galera members, node i on member i first; member 0
// SIGKILLed under load, restarted, rejoining by state transfer.
func galera(r *Run) error { return galeraRun(r, false) }

// galeraOneWriter: the same with every node listing the members in the
// same order, so all writes go through one member (the recommended setup
// for hot ORDERED keys: no certification conflicts) until it dies.
func galeraOneWriter(r *Run) error { return galeraRun(r, true) }

func galeraRun(r *Run, oneWriter bool) error {
	t := time.Now()
	names := []string{r.Name + "-g0", r.Name + "-g1", r.Name + "-g2"}
	g, err := harness.StartGalera(filepath.Join(r.Env.WorkDir, r.Name), r.Env.Servers.Mariadbd,
		fmt.Sprintf("idgen_faults_%d", time.Now().UnixNano()%1000000), names, 90*time.Second)
	if g != nil {
		defer g.Close()
	}
	if err != nil {
		return err
	}
	r.Note("Galera: 3 members Synced %v after the start", time.Since(t).Round(100*time.Millisecond))
	o := ClusterOpts{Step: replStep, MySQLBase: g.Members[0].Base(), MySQLNode: map[int]string{}}
	for i := range 3 {
		o.MySQLNode[i] = g.DSN(i)
		if oneWriter {
			o.MySQLNode[i] = g.DSN(0)
		}
	}
	c, err := std(r, o)
	if err != nil {
		return err
	}
	r.from = time.Now()
	r.load = harness.StartLoad(hotCallers(r, c.Active()), 5*time.Millisecond, r.seed)
	r.Sleep(10 * time.Second)
	tKill := time.Now()
	g.Kill(0)
	r.Note("member g0 (n0's first) SIGKILLed")
	r.Sleep(15 * time.Second)
	t = time.Now()
	if err := g.Restart(0); err != nil {
		return err
	}
	if err := g.WaitSynced(0, 60*time.Second); err != nil {
		return err
	}
	r.Note("g0 restarted, Synced %v later (state transfer)", time.Since(t).Round(100*time.Millisecond))
	r.Sleep(10 * time.Second)
	r.StopLoad()
	for _, n := range c.Active() {
		r.Note("after the kill, %s", gapsNote(r.calls, tKill, r.to, n.Name))
	}
	var ref []string
	for _, n := range c.Active() {
		ref = append(ref, n.Name+": "+refusals(r.calls, n.Name))
	}
	r.Note("refusals: %s", strings.Join(ref, "; "))
	r.Note("node log lines with Galera certification conflicts (Error 1213): %s", logMatches(c.Active(), time.Time{}, "error 1213"))
	return nil
}

// mysqlPartition: n0 reaches the suite's MariaDB through a proxy that
// partitions it silently for three store timeouts, then heals.
func mysqlPartition(r *Run) error {
	s := r.Env.Servers
	p, err := harness.NewTCPProxy(fmt.Sprintf("127.0.0.1:%d", s.MySQLPort))
	if err != nil {
		return err
	}
	r.proxies = append(r.proxies, p)
	c, err := std(r, ClusterOpts{MySQLNode: map[int]string{0: "root@tcp(" + p.Addr + ")/"}})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(4 * time.Second)
	p.Partition()
	t := time.Now()
	r.Note("n0 silently partitioned from MariaDB (%d connections held)", p.Active())
	r.Sleep(3 * storeTimeout)
	p.Heal()
	tHeal := time.Now()
	r.Note("healed after %v", tHeal.Sub(t).Round(100*time.Millisecond))
	back := map[string]time.Duration{}
	deadline := tHeal.Add(30 * time.Second)
	for time.Now().Before(deadline) && len(back) < 2 {
		for _, call := range r.load.Since(tHeal) {
			if call.Node == "n0" && call.OK() && !call.Start.Before(tHeal) && (call.Channel == checker.Unordered || call.Channel == checker.Ordered) {
				if _, ok := back[call.Channel]; !ok {
					back[call.Channel] = call.End.Sub(tHeal)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	var bs []string
	for _, ch := range []string{checker.Unordered, checker.Ordered} {
		if d, ok := back[ch]; ok {
			bs = append(bs, fmt.Sprintf("%s %v", ch, d.Round(time.Millisecond)))
		} else {
			bs = append(bs, ch+" not within 30 s")
		}
	}
	r.Note("n0 serving again after the heal (first ID answered to a call sent after it): %s", strings.Join(bs, ", "))
	r.Sleep(10 * time.Second)
	r.StopLoad()
	for _, n := range c.Active() {
		r.Note("during the partition and after, %s", gapsNote(r.calls, t, r.to, n.Name))
	}
	r.Note("n0 refusals: %s", refusals(r.calls, "n0"))
	return nil
}

// storeTimeout is idgen's default --store-timeout (idgen --help).
const storeTimeout = 2 * time.Second
