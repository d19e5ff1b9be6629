package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/transport"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/server"
)

// TestEmbeddedServerRunsKitexOptions: the server embedded with
// server.Run and this example's KitexOptions serves, and the tracer counts
// the RPCs it served; the middleware sees every call (a zero threshold
// logs them all).
func TestEmbeddedServerRunsKitexOptions(t *testing.T) {
	rpc, admin := freeAddr(t), freeAddr(t)
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Options{Version: "test", KitexOptions: opts},
			[]string{"--data-dir", t.TempDir(), "--rpc-addr", rpc, "--admin-addr", admin, "--log-level", "error"},
			func(string) string { return "" }, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	c, err := idgenservice.NewClient("idgen", client.WithHostPorts(rpc), client.WithRPCTimeout(3*time.Second),
		client.WithTransportProtocol(transport.TTHeaderFramed))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Standalone: the business is created on first use.
		_, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "order", Count: 3})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NextIDs: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(10 * time.Second)
	for counter.Calls("NextIDs") == 0 { // Finish runs after the reply is sent
		if time.Now().After(deadline) {
			t.Fatalf("tracer counted no NextIDs: %s", counter)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(logged, "\n"), "slow RPC: NextIDs") {
		t.Errorf("middleware logged %q, want a line for NextIDs", logged)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
