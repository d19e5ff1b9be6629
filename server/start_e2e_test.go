package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/segment/mysqlstore"
)

// TestE2E_StartDoesNotWaitForOrderedClaims (issue 31): a new node whose
// ORDERED shard claims cannot complete (the test holds a lock on the
// shards' fence table, so every store claim waits) serves SNOWFLAKE,
// UNORDERED and CreateBiz, refuses ORDERED as retryable, and /readyz says
// ORDERED is starting and what it waits for, while the node itself is
// ready. Before, the node refused everything as "starting (electing ORDERED
// shard owners)" and then reported ORDERED as serving although no shard
// was claimed.
func TestE2E_StartDoesNotWaitForOrderedClaims(t *testing.T) {
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	ctx := context.Background()
	dsn := testdb.New(t, base)
	// The schema first (what the node would create), then a transaction
	// that locks the empty fence table: a claim's insert waits on it.
	store, err := mysqlstore.Open(ctx, mysqlstore.Config{DSN: dsn, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // released at the end
	rows, err := tx.QueryContext(ctx, `SELECT shard FROM ordered_shard WHERE shard >= 0 FOR UPDATE`)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()

	args := []string{"--zk", zkAddr, "--mysql", dsn, "--cluster", fmt.Sprintf("held%d", rand.Uint32()),
		"--advertise-host", "127.0.0.1", "--auto-create-biz", "true", "--properties-dir", t.TempDir()}
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: args, NoWaitStarted: true})
	n.WaitSnowflake(t, 60*time.Second)

	code, body, err := n.Get(ctx, "/readyz?channel=ordered")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, `"state":"starting"`) ||
		!strings.Contains(body, "claiming ORDERED shards") {
		t.Fatalf("/readyz?channel=ordered while the claims wait: %d %s %v; want 503 starting, claiming ORDERED shards", code, body, err)
	}
	if code, body, err := n.Get(ctx, "/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz while the claims wait: %d %s %v; want 200 (SNOWFLAKE and UNORDERED serve)", code, body, err)
	}
	c := n.Client(t)
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "held", Channel: ch(idl.Channel_SNOWFLAKE), Channels: allChannels}); err != nil {
		t.Fatalf("CreateBiz while the claims wait: %v", err)
	}
	for _, channel := range []idl.Channel{idl.Channel_SNOWFLAKE, idl.Channel_UNORDERED} {
		if _, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "held", Channel: ch(channel), Count: 3}); err != nil {
			t.Fatalf("%s while the claims wait: %v", channel, err)
		}
	}
	_, err = c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "held", Channel: ch(idl.Channel_ORDERED), SubKey: str("k"), Count: 1})
	var ie *idl.IdgenError
	if !errors.As(err, &ie) || !ie.Retryable {
		t.Fatalf("ORDERED while the claims wait: %v; want a retryable refusal", err)
	}

	// The lock goes: the claims complete and ORDERED serves.
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	testnode.WaitFor(t, 60*time.Second, "ORDERED serving once the claims can complete", func() bool {
		_, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "held", Channel: ch(idl.Channel_ORDERED), SubKey: str("k"), Count: 1})
		return err == nil
	})
	// One key serving says its shard is claimed; the other claims finish
	// on their own (each retries after its lock wait), so readiness is
	// waited for, bounded, rather than read once (it read "60 of 64" on a
	// loaded run).
	testnode.WaitFor(t, 60*time.Second, "/readyz?channel=ordered 200 once every claim completed", func() bool {
		code, _, _ := n.Get(ctx, "/readyz?channel=ordered")
		return code == http.StatusOK
	})
}
