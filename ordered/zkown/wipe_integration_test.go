package zkown

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/internal/testnode/zkensemble"
	"github.com/idgen/idgen/internal/wait"
	"github.com/idgen/idgen/ordered"
)

// TestIntegrationWipeRecovers (issue 29 hole l) on a real server: a
// standalone ZooKeeper restarted on an emptied data dir refuses the
// handshake of every client that saw its old zxids ("authentication
// failed: EOF", forever). Deleting the subtree is not the same: the server
// keeps its zxids and nothing is refused. Before the fix the coordinator
// kept its one client and ORDERED stayed down until the process restarted;
// on the session manager the client is replaced, the wipe is counted as a
// restore, and every shard is held again.
func TestIntegrationWipeRecovers(t *testing.T) {
	if os.Getenv("IDGEN_TEST_ZK") == "" || !zkensemble.Installed() {
		t.Skip("IDGEN_TEST_ZK not set or no ZooKeeper installed: run ./build.sh test")
	}
	dir := t.TempDir()
	ens, err := zkensemble.New(zkensemble.Config{Dir: filepath.Join(dir, "ens"), N: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ens.Close)
	// (zkensemble's StartAll and Restore wait for a leader; a standalone
	// server has none, so the test starts and waits itself.)
	start := func() {
		t.Helper()
		if err := ens.Start(0); err != nil {
			t.Fatal(err)
		}
		wait.OK(t, 90*time.Second, "ZooKeeper serving", func() error {
			st, err := ens.Status(0)
			if err == nil && !st.Serving() {
				err = fmt.Errorf("mode %q", st.Mode)
			}
			return err
		})
	}
	start()
	const lease = time.Second
	cfg := Config{Servers: ens.Addrs(), Root: "/idgen-test", Cluster: "wipe-it", Self: "127.0.0.1:17001",
		Lease: lease, SessionTimeout: 4 * time.Second, Timeout: time.Second, Version: "it",
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{}
	h := newRecorder(cfg.Self, ordered.SystemClock{}, j)
	if err := c.Start(ctx, h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	held := func() error {
		if n := len(h.heldShards()); n != Shards {
			return fmt.Errorf("%d of %d shards held", n, Shards)
		}
		return nil
	}
	wait.OK(t, 60*time.Second, "every shard held", held)
	before := c.sess.View()

	// The wipe: the server restarted on an emptied data dir (myid kept).
	if err := ens.Stop(0); err != nil {
		t.Fatal(err)
	}
	data := ens.DataDir(0)
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "myid"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start()
	wiped := time.Now()
	wait.OK(t, 60*time.Second, "the shards dropped", func() error {
		if n := len(h.heldShards()); n != 0 {
			return fmt.Errorf("%d shards still held after the wipe", n)
		}
		return nil
	})
	wait.OK(t, 90*time.Second, "every shard held again after the wipe", held)
	after := c.sess.View()
	if after.Client == before.Client || after.Restores == before.Restores {
		t.Fatalf("session before %+v, after %+v: want a new client and a restore counted", before, after)
	}
	t.Logf("ORDERED owners back %v after the wipe (session: %+v)", time.Since(wiped).Round(time.Millisecond), after)
}
