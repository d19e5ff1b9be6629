package mysqlstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/faults/harness"
	"github.com/idgen/idgen/segment/mysqlstore"
)

// TestIntegration_ReplicaReconnecting (issue 29 hole f, real servers): a
// MariaDB primary with an asynchronous replica. While the replica's I/O
// thread is stopped (a replica reconnecting) the primary has no binlog
// dump thread: read afresh, that is "no-replica" (safe), which is what
// idgen said before the fix; a node that saw the replica keeps judging it
// async (lossy). Then semi-synchronous AFTER_SYNC replication enabled on
// the primary with no semi-synchronous client is semisync-degraded, not
// no-replica. It starts two private servers (the shared test server is
// not touched): it needs IDGEN_TEST_MYSQL (servers available) and a
// mariadbd (IDGEN_FAULTS_MARIADBD or on PATH).
func TestIntegration_ReplicaReconnecting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two MariaDB servers (about a minute): not in -short")
	}
	if os.Getenv("IDGEN_TEST_MYSQL") == "" {
		t.Skip("IDGEN_TEST_MYSQL not set: run ./build.sh test")
	}
	bin := os.Getenv("IDGEN_FAULTS_MARIADBD")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("mariadbd"); err != nil {
			t.Skip("no mariadbd: set IDGEN_FAULTS_MARIADBD")
		}
	}
	start := time.Now()
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "template")
	if err := harness.InstallDataDir(tmpl); err != nil {
		t.Fatal(err)
	}
	p, err := harness.NewMariaDB("repl-P", bin, filepath.Join(dir, "p"), tmpl, harness.ReplicationFlags(1))
	if err != nil {
		t.Fatal(err)
	}
	r, err := harness.NewMariaDB("repl-R", bin, filepath.Join(dir, "r"), tmpl, harness.ReplicationFlags(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, m := range []*harness.MariaDB{p, r} {
			wg.Add(1)
			go func() { defer wg.Done(); m.Close() }()
		}
		wg.Wait()
	})
	errs := make(chan error, 2)
	for _, m := range []*harness.MariaDB{p, r} {
		go func() { errs <- m.Start(90 * time.Second) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("servers started after %v", time.Since(start).Round(time.Millisecond))
	if err := r.ReplicateFrom(p, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitStatus := func(name, want string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			v, err := p.Status(name)
			if err == nil && v == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("primary status %s = %q (%v), want %q after 60s", name, v, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitStatus("Slaves_connected", "1")
	t.Logf("replicating after %v", time.Since(start).Round(time.Millisecond))

	var h mysqlstore.ReplicaHistory
	v, err := h.Read(ctx, p.DB())
	if err != nil || v.Verdict != mysqlstore.VerdictAsync {
		t.Fatalf("replica attached: %s, %v; want async", v, err)
	}

	// The replica reconnecting: its I/O thread is not connected, and the
	// primary has dropped the binlog dump thread (as it does when the
	// replica's connection breaks; killed here rather than waiting for
	// the primary's network timeout).
	if err := r.Exec("STOP SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	rows, err := p.DB().QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_ = p.Exec(fmt.Sprintf("KILL %d", id)) // gone already: fine
	}
	waitStatus("Slaves_connected", "0")
	t.Logf("replica disconnected after %v", time.Since(start).Round(time.Millisecond))
	fresh, err := mysqlstore.ReadReplication(ctx, p.DB())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read afresh while the replica reconnects: %s", fresh)
	if fresh.Verdict != mysqlstore.VerdictNoReplica {
		t.Fatalf("afresh: %s; want no-replica (nothing tells this read about the replica)", fresh)
	}
	if v, err := h.Read(ctx, p.DB()); err != nil || v.Verdict != mysqlstore.VerdictAsync || v.Safe() {
		t.Fatalf("replica reconnecting, seen before: %s, %v; want async (lossy)", v, err)
	}

	// Semi-synchronous replication configured, no semi-synchronous client.
	if err := p.Exec("SET GLOBAL rpl_semi_sync_master_wait_point=AFTER_SYNC", "SET GLOBAL rpl_semi_sync_master_enabled=ON"); err != nil {
		t.Fatal(err)
	}
	v, err = mysqlstore.ReadReplication(ctx, p.DB())
	if err != nil || v.Verdict != mysqlstore.VerdictSemisyncDegraded || v.Safe() {
		t.Fatalf("semi-sync enabled, 0 clients: %s, %v; want semisync-degraded", v, err)
	}
	t.Logf("semi-sync enabled, 0 clients: %s", v)
}
