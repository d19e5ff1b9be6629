package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/endpoint"
	"github.com/cloudwego/kitex/pkg/limit"
	"github.com/cloudwego/kitex/pkg/remote/trans/gonet"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"
	"github.com/cloudwego/kitex/server"
	"github.com/cloudwego/kitex/transport"

	"github.com/idgen/idgen/internal/testnode"
	"github.com/idgen/idgen/internal/wait"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// kitexOptsTracer counts the RPCs it saw finish, by method.
type kitexOptsTracer struct {
	mu       sync.Mutex
	finished map[string]int
}

func (tr *kitexOptsTracer) Start(ctx context.Context) context.Context { return ctx }

func (tr *kitexOptsTracer) Finish(ctx context.Context) {
	ri := rpcinfo.GetRPCInfo(ctx)
	if ri == nil || ri.Invocation() == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.finished[ri.Invocation().MethodName()]++
}

func (tr *kitexOptsTracer) count(method string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.finished[method]
}

var _ stats.Tracer = (*kitexOptsTracer)(nil)

// TestE2E_KitexOptionsTakeEffect: a middleware and a stats tracer passed
// in Options.KitexOptions run on the RPCs of an embedded node (Run
// in-process), beside idgen's own options (its listener on rpc_addr).
func TestE2E_KitexOptionsTakeEffect(t *testing.T) {
	var mwCalls atomic.Int64
	var mwMethod atomic.Value
	mw := func(next endpoint.Endpoint) endpoint.Endpoint {
		return func(ctx context.Context, req, resp any) error {
			mwCalls.Add(1)
			if ri := rpcinfo.GetRPCInfo(ctx); ri != nil {
				mwMethod.Store(ri.Invocation().MethodName())
			}
			return next(ctx, req, resp)
		}
	}
	tr := &kitexOptsTracer{finished: map[string]int{}}
	rpc := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Version: "test", KitexOptions: []server.Option{
			server.WithMiddleware(mw), server.WithTracer(tr),
		}}, []string{"--data-dir", t.TempDir(), "--rpc-addr", rpc, "--admin-addr", freeAddr(t), "--log-level", "error"},
			func(string) string { return "" }, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	c, err := idgensvc.NewClient("idgen", client.WithHostPorts(rpc), client.WithRPCTimeout(3*time.Second),
		client.WithTransportProtocol(transport.TTHeaderFramed))
	if err != nil {
		t.Fatal(err)
	}
	// NextIDs succeeds once the node has started (standalone: the
	// business is created on first use).
	wait.OK(t, 30*time.Second, "NextIDs", func() error {
		_, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "order", Count: 1})
		return err
	})
	if mwCalls.Load() == 0 || mwMethod.Load() != "NextIDs" {
		t.Errorf("middleware calls %d, last method %v; want NextIDs seen", mwCalls.Load(), mwMethod.Load())
	}
	// The tracer's Finish runs after the reply is written: poll.
	wait.For(t, 10*time.Second, "the tracer seeing a NextIDs RPC finish", func() bool { return tr.count("NextIDs") > 0 })
}

// TestE2E_KitexOptionsConflictRefused: an extra option that would replace
// idgen's listener makes Run fail at start, naming it, without serving.
func TestE2E_KitexOptionsConflictRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = Run(ctx, Options{Version: "test", KitexOptions: []server.Option{server.WithTracer(&kitexOptsTracer{}), server.WithListener(ln)}},
		[]string{"--data-dir", t.TempDir(), "--rpc-addr", freeAddr(t), "--admin-addr", freeAddr(t), "--log-level", "error"},
		func(string) string { return "" }, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "KitexOptions[1]") || !strings.Contains(err.Error(), "listener") {
		t.Fatalf("Run with WithListener in KitexOptions: %v; want a refusal naming KitexOptions[1] and the listener", err)
	}
}

// TestCheckKitexOptions: which extra options are refused, with and
// without TLS.
func TestCheckKitexOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name    string
		op      server.Option
		tls     bool
		refused string // "" : accepted
	}{
		{"middleware", server.WithMiddleware(func(next endpoint.Endpoint) endpoint.Endpoint { return next }), false, ""},
		{"tracer", server.WithTracer(&kitexOptsTracer{}), false, ""},
		{"exit wait", server.WithExitWaitTime(time.Second), false, ""},
		{"qps limit", server.WithLimit(&limit.Option{MaxQPS: 100}), true, ""},
		{"conn limit plaintext", server.WithLimit(&limit.Option{MaxConnections: 100}), false, ""},
		{"conn limit tls", server.WithLimit(&limit.Option{MaxConnections: 100}), true, "connection limit"},
		{"listener", server.WithListener(ln), false, "listener"},
		{"service addr", server.WithServiceAddr(ln.Addr()), false, "listener"},
		{"trans server", server.WithTransServerFactory(gonet.NewTransServerFactory()), false, "transport"},
		{"trans handler", server.WithTransHandlerFactory(gonet.NewSvrTransHandlerFactory()), false, "transport"},
		{"exit signal", server.WithExitSignal(func() <-chan error { return nil }), false, "exit signal"},
		{"empty", server.Option{}, false, "empty"},
	} {
		err := checkKitexOptions([]server.Option{tc.op}, tc.tls)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, tc.refused)
		}
	}
}

func freeAddr(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", testnode.FreePort(t)) }
