// Package inproc runs a whole idgen server inside the test's process
// (server.Run), for the tests of programs that embed it (examples/) and of
// plain Kitex clients (resolver/). internal/testnode runs real idgen
// processes instead, for tests that kill, pause or restart them.
package inproc

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/transport"

	"github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/server"
)

// Node is a server started by Start.
type Node struct {
	RPC   string // the RPC address, 127.0.0.1:port
	Admin string // the admin HTTP address
}

// Start runs server.Run with opts and args (the node's flags: --data-dir
// and the mode's flags), adding free loopback --rpc-addr and --admin-addr
// and --log-level error, and no environment. It returns at once: the node
// answers "starting" until it serves (wait with Eventually). When the test
// ends the node is stopped, and an error from Run fails the test.
func Start(t testing.TB, opts server.Options, args ...string) *Node {
	t.Helper()
	n := &Node{RPC: FreeAddr(t), Admin: FreeAddr(t)}
	args = append([]string{"--rpc-addr", n.RPC, "--admin-addr", n.Admin, "--log-level", "error"}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, opts, args, func(string) string { return "" }, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	return n
}

// Client is a plain Kitex client of the node (TTHeader framed, 3 s per
// call), with extra options after those.
func (n *Node) Client(t testing.TB, opts ...client.Option) idgenservice.Client {
	t.Helper()
	return NewClient(t, append([]client.Option{client.WithHostPorts(n.RPC)}, opts...)...)
}

// NewClient is a plain Kitex client of the idgen service (TTHeader framed,
// 3 s per call) with opts, which say how it finds nodes.
func NewClient(t testing.TB, opts ...client.Option) idgenservice.Client {
	t.Helper()
	c, err := idgenservice.NewClient("idgen", append([]client.Option{client.WithRPCTimeout(3 * time.Second),
		client.WithTransportProtocol(transport.TTHeaderFramed)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Eventually calls f every 50 ms until it returns nil, failing the test
// with f's last error after d (a node starting, a member registering).
func Eventually(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreeAddr is a loopback address with a port free at the time of the call.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
