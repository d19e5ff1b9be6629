package testnode

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// dialEnsemble connects a go-zookeeper client to the whole ensemble and
// waits for its session, at most 30 s.
func dialEnsemble(t *testing.T, e *Ensemble) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect(e.Addrs(), 5*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events {
					}
				}()
				return c
			}
		case <-deadline:
			t.Fatalf("no ZooKeeper session with %s after 30s", e.Connect())
		}
	}
}

// retry runs f until it succeeds, at most d: a client that lost its server
// with the leader reconnects to another one within its session.
func retry(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIntegration_EnsembleElection drives a real three-server ensemble
// through what production ensembles go through: the leader SIGKILLed and a
// new one elected while a client keeps its session, the killed server back
// as a follower, and a restore from a copy of the data dirs taken while it
// ran, which forgets what was written after the copy.
func TestIntegration_EnsembleElection(t *testing.T) {
	e := StartEnsemble(t, 3)
	if got := len(e.Addrs()); got != 3 {
		t.Fatalf("Addrs: %d servers", got)
	}
	leader := e.Leader()
	if leader < 0 {
		t.Fatal("no leader after WaitServing")
	}
	c := dialEnsemble(t, e)
	if _, err := c.Create("/before", []byte("1"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	snap := e.Snapshot()

	e.Kill(leader)
	t0 := time.Now()
	next := e.WaitLeader(leader, 30*time.Second)
	t.Logf("leader %d killed: server %d leads %v later", leader, next, time.Since(t0).Round(time.Millisecond))
	// Written after the snapshot, through the new leader, by the same
	// session.
	retry(t, 10*time.Second, "create /after on the new quorum", func() error {
		_, err := c.Create("/after", []byte("2"), 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return nil // an earlier attempt was applied, its reply lost
		}
		return err
	})
	e.Start(leader)
	e.WaitServing(60 * time.Second)
	for i := range e.Addrs() {
		st, err := e.Z.Status(i)
		if err != nil || !st.Serving() {
			t.Fatalf("server %d after the restart: %+v %v", i, st, err)
		}
	}
	if l := e.Leader(); l == leader {
		t.Fatalf("the restarted server %d leads again: it should have rejoined as a follower", l)
	}

	e.Restore(snap)
	c2 := dialEnsemble(t, e)
	if ok, _, err := c2.Exists("/before"); err != nil || !ok {
		t.Fatalf("/before after the restore: exists %v, %v", ok, err)
	}
	if ok, _, err := c2.Exists("/after"); err != nil || ok {
		t.Fatalf("/after (written after the snapshot) after the restore: exists %v, %v", ok, err)
	}
	if e.Leader() < 0 {
		t.Fatal("no leader after the restore")
	}
}
