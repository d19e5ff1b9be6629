package zkguard

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestIntegration_GateOpenLevels (issue 32): every start opens the gate
// once, which is no failover and needs no look: info. An opening after a
// close (here a MySQL server change) ends an ORDERED outage: warn, as
// before.
func TestIntegration_GateOpenLevels(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	srv := &fakeServer{id: "server/1"}
	a := newGuard(t, clusterName(t), "a:1", func(c *Config) { c.Logger = zap.New(core) })
	a.StartBarrier(srv, Repair{Flush: func(context.Context) error { return nil }})
	first := "ORDERED gate open: the cluster's MySQL server is known and every member raised its rows on it"
	again := "ORDERED gate open again: every member raised the rows it remembers on the new MySQL server, or cannot serve any more"
	waitFor(t, "the gate's first opening logged", 30*time.Second, func() bool { return logs.FilterMessage(first).Len() == 1 })
	if e := logs.FilterMessage(first).All()[0]; e.Level != zapcore.InfoLevel {
		t.Fatalf("first opening at %v, want info", e.Level)
	}
	if w := logs.FilterLevelExact(zapcore.WarnLevel).All(); len(w) != 0 {
		t.Fatalf("a start warned: %v", w)
	}

	srv.set("server/2")
	a.ServerChanged("server/1", "server/2")
	waitFor(t, "the reopening logged", 30*time.Second, func() bool { return logs.FilterMessage(again).Len() == 1 })
	if e := logs.FilterMessage(again).All()[0]; e.Level != zapcore.WarnLevel {
		t.Fatalf("opening after a server change at %v, want warn", e.Level)
	}
	if n := logs.FilterMessage(first).Len(); n != 1 {
		t.Fatalf("%d first-opening lines, want 1", n)
	}
}
