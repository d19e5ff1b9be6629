package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/cluster/zksession"
)

// sharedSession opens a zksession.Session on the fake, as the server opens
// the node's one session and hands it to every guard.
func sharedSession(t *testing.T, f *fakeZK, check func(context.Context, zksession.ZK) (bool, string, error)) *zksession.Session {
	t.Helper()
	s, err := zksession.Start(zksession.Config{Servers: []string{"fake:2181"}, SessionTimeout: 2 * time.Second,
		Connect: f.connect, ServerStats: f.serverStats, Check: check, Logger: zaptest.NewLogger(t).Named("zk")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestSharedSessionIsNotClosedByTheLease: a lease given the node's
// session uses it and leaves it open when it closes (the other guards
// still hold their ephemerals under it).
func TestSharedSessionIsNotClosedByTheLease(t *testing.T) {
	f := newFakeZK()
	s := sharedSession(t, f, nil)
	cfg := fakeConfig(t, f, newTestHolder("a", nil, nil), 9000)
	cfg.Session, cfg.Servers, cfg.Connect = s, nil, nil
	a := register(t, cfg)
	if got, want := a.Status().SessionID, s.View().ID; got != want || got == 0 {
		t.Fatalf("lease session %x, shared session %x", got, want)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := s.View(); !v.Has || v.Closed {
		t.Fatalf("shared session after the lease closed: %+v", v)
	}
}

// TestRestoreFoundByTheCheckReclaims: the session comes back after a
// disconnect (same session id) and the cluster check finds ZooKeeper
// restored. The lease stops issuing, records the restore in the cluster
// record (StateLosses) and claims its slot again above everything it
// issued; no (worker, millisecond) is issued twice.
func TestRestoreFoundByTheCheckReclaims(t *testing.T) {
	f := newFakeZK()
	var restored atomic.Bool
	s := sharedSession(t, f, func(context.Context, zksession.ZK) (bool, string, error) {
		if restored.Swap(false) {
			return true, "incarnation marker went back (test)", nil
		}
		return false, "", nil
	})
	log := newIssuedLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newTestHolder("a", nil, log)
	cfg := fakeConfig(t, f, h, 9000)
	cfg.Session = s
	a := register(t, cfg)
	go h.issueLoop(ctx)
	waitFor(t, "a issuing", 5*time.Second, func() bool { return h.snap().issued > 5 })
	sid := a.Status().SessionID

	restored.Store(true)
	c := connOf(a)
	c.Disconnect()
	c.Reconnect()
	waitFor(t, "the restore recorded and the slot claimed again", 10*time.Second, func() bool {
		return a.Status().StateLosses == 1 && a.State() == StateRegistered && len(h.snap().acquired) >= 2
	})
	if got := a.Status().SessionID; got != sid {
		t.Fatalf("session %x, want the same session %x (only the check found the restore)", got, sid)
	}
	if len(h.snap().fenced) == 0 {
		t.Fatal("not fenced while the restore was recorded")
	}
	waitFor(t, "a issuing again", 5*time.Second, func() bool { return h.snap().issued > 50 })
	cancel()
	log.check(t)
	h.checkNoProblems(t)
}
