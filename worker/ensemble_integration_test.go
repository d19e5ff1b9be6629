package worker

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode/zkensemble"
)

// TestIntegration_EnsembleLeaderKillKeepsSessions (issue 17 item 1): on a
// real three-server ensemble, the leader is SIGKILLed while three leases
// issue; the ensemble elects a new one and the server comes back. No lease
// replaces its client, loses its session or stops issuing, and no
// (worker, millisecond) is issued twice.
func TestIntegration_EnsembleLeaderKillKeepsSessions(t *testing.T) {
	if os.Getenv("IDGEN_TEST_ZK") == "" || !zkensemble.Installed() {
		t.Skip("IDGEN_TEST_ZK not set or no ZooKeeper installed: run ./build.sh test")
	}
	ens, err := zkensemble.New(zkensemble.Config{Dir: t.TempDir(), N: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ens.Close)
	if err := ens.StartAll(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	log := newIssuedLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := uniqueCluster(t)
	var leases []*ZKLease
	var holders []*testHolder
	for i := range 3 {
		h := newTestHolder(fmt.Sprint("n", i), nil, log)
		cfg := ensConfig(t, ens, name, h, 7000+i)
		l := register(t, cfg)
		leases, holders = append(leases, l), append(holders, h)
		go h.issueLoop(ctx)
	}
	sessions := make([]int64, len(leases))
	for i, l := range leases {
		sessions[i] = l.Status().SessionID
	}
	leader := ens.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	if err := ens.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if _, err := ens.WaitLeader(leader, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := ens.Start(leader); err != nil {
		t.Fatal(err)
	}
	if err := ens.WaitServing(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	for i, h := range holders {
		n := h.snap().issued
		waitFor(t, fmt.Sprintf("lease %d issuing after the election", i), 30*time.Second, func() bool { return h.snap().issued > n+20 })
	}
	cancel()
	for i, l := range leases {
		if st := l.Status(); st.SessionID != sessions[i] || st.State != StateRegistered {
			t.Errorf("lease %d: session %x state %s after the election, want session %x registered", i, st.SessionID, st.State, sessions[i])
		}
		if f := holders[i].snap().fenced; len(f) != 0 {
			t.Errorf("lease %d fenced during the election: %v", i, f)
		}
	}
	log.check(t)
}

// ensConfig is itConfig against an ensemble, with a lead that rides out an
// election (ZooKeeper elects in seconds here).
func ensConfig(t *testing.T, ens *zkensemble.Ensemble, name string, h Holder, port int) Config {
	t.Helper()
	cfg := itConfig(t, ens.Connect(), name, h, port)
	cfg.Servers = ens.Addrs()
	cfg.SessionTimeout = 6 * time.Second
	cfg.HeartbeatInterval = 500 * time.Millisecond
	cfg.OutageTolerance = 20 * time.Second
	return cfg
}
