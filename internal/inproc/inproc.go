// Package inproc runs a whole idgen server inside the test's process
// (server.Run), for the tests of programs that embed it (examples/) and of
// plain Kitex clients (resolver/). internal/testnode runs real idgen
// processes instead, for tests that kill, pause or restart them.
package inproc

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/transport"

	"github.com/idgen/idgen/internal/testnode"
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
// answers "starting" until it serves (poll with internal/wait). When the test
// ends the node is stopped, and an error from Run fails the test.
func Start(t testing.TB, opts server.Options, args ...string) *Node {
	t.Helper()
	n := &Node{RPC: freeAddr(t), Admin: freeAddr(t)}
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

func freeAddr(t testing.TB) string { return fmt.Sprintf("127.0.0.1:%d", testnode.FreePort(t)) }
