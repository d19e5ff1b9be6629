package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/inproc"
	"github.com/idgen/idgen/internal/wait"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/server"
)

// TestEmbeddedServerRunsKitexOptions: the server embedded with
// server.Run and this example's KitexOptions serves, and the tracer counts
// the RPCs it served; the middleware sees every call (a zero threshold
// logs them all).
func TestEmbeddedServerRunsKitexOptions(t *testing.T) {
	var (
		mu     sync.Mutex
		logged []string
	)
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	counter := NewRPCCounter(logf)
	// A zero threshold makes every call "slow": the middleware's line
	// shows it ran.
	opts := KitexOptions(counter, logf, 0)
	n := inproc.Start(t, server.Options{Version: "test", KitexOptions: opts}, "--data-dir", t.TempDir())
	c := n.Client(t)
	// Standalone: the business is created on first use.
	wait.OK(t, 30*time.Second, "NextIDs", func() error {
		_, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "order", Count: 3})
		return err
	})
	// The tracer's Finish runs after the reply is sent.
	wait.OK(t, 10*time.Second, "the tracer counting NextIDs", func() error {
		if counter.Calls("NextIDs") == 0 {
			return fmt.Errorf("counted %s", counter)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(logged, "\n"), "slow RPC: NextIDs") {
		t.Errorf("middleware logged %q, want a line for NextIDs", logged)
	}
}
