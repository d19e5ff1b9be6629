// Command embed runs the whole idgen server (package server) with extra
// Kitex server options: a middleware that logs slow calls and a
// stats.Tracer that counts the RPCs per method and logs the failed ones,
// both passed in server.Options.KitexOptions. Every flag of idgen works
// (`go run ./examples/embed --data-dir /tmp/e`).
//
// For real tracing, pass a tracing suite instead of (or beside) the small
// tracer here, e.g. OpenTelemetry's from kitex-contrib:
//
//	import "github.com/kitex-contrib/obs-opentelemetry/tracing"
//	server.Options{KitexOptions: []kserver.Option{kserver.WithSuite(tracing.NewServerSuite())}}
//
// KitexOptions must leave idgen's listener, transport, codec and exit
// signal alone: server.Run refuses options that set them (see
// server.Options.KitexOptions).
package main

import (
	"context"
	"log"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/endpoint"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"
	kserver "github.com/cloudwego/kitex/server"

	"github.com/idgen/idgen/server"
)

// SlowCalls is a Kitex middleware that logs every call that takes longer
// than threshold, with its method and duration.
func SlowCalls(logf func(format string, args ...any), threshold time.Duration) endpoint.Middleware {
	return func(next endpoint.Endpoint) endpoint.Endpoint {
		return func(ctx context.Context, req, resp any) error {
			start := time.Now()
			err := next(ctx, req, resp)
			if d := time.Since(start); d > threshold {
				logf("slow RPC: %s took %v (err: %v)", method(ctx), d, err)
			}
			return err
		}
	}
}

// RPCCounter is a stats.Tracer: it counts the RPCs that finished, per
// method, and logs those that failed in Kitex (transport, codec, a
// panic) with how long they took.
type RPCCounter struct {
	logf func(format string, args ...any)

	mu    sync.Mutex
	calls map[string]int64
}

var _ stats.Tracer = (*RPCCounter)(nil)

// NewRPCCounter returns an RPCCounter that logs through logf.
func NewRPCCounter(logf func(format string, args ...any)) *RPCCounter {
	return &RPCCounter{logf: logf, calls: map[string]int64{}}
}

// Start implements stats.Tracer: Kitex calls it when an RPC begins.
func (c *RPCCounter) Start(ctx context.Context) context.Context { return ctx }

// Finish implements stats.Tracer: Kitex calls it after the reply is sent.
func (c *RPCCounter) Finish(ctx context.Context) {
	ri := rpcinfo.GetRPCInfo(ctx)
	if ri == nil {
		return
	}
	m := method(ctx)
	c.mu.Lock()
	c.calls[m]++
	c.mu.Unlock()
	st := ri.Stats()
	if st == nil || st.Error() == nil {
		return
	}
	var took time.Duration
	if s, f := st.GetEvent(stats.RPCStart), st.GetEvent(stats.RPCFinish); s != nil && f != nil {
		took = f.Time().Sub(s.Time())
	}
	c.logf("RPC %s failed after %v: %v", m, took, st.Error())
}

// Calls returns the number of finished RPCs of method.
func (c *RPCCounter) Calls(method string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[method]
}

// String is the counts, "Clock=2 NextIDs=10".
func (c *RPCCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for m, n := range c.calls {
		parts = append(parts, m+"="+strconv.FormatInt(n, 10))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func method(ctx context.Context) string {
	if ri := rpcinfo.GetRPCInfo(ctx); ri != nil && ri.Invocation() != nil {
		return ri.Invocation().MethodName()
	}
	return "unknown"
}

// KitexOptions are the extra options this example adds to idgen's: the
// SlowCalls middleware with threshold slow, and counter as a tracer.
func KitexOptions(counter *RPCCounter, logf func(format string, args ...any), slow time.Duration) []kserver.Option {
	return []kserver.Option{
		kserver.WithMiddleware(SlowCalls(logf, slow)),
		kserver.WithTracer(counter),
	}
}

func main() {
	counter := NewRPCCounter(log.Printf)
	go func() {
		for range time.Tick(time.Minute) {
			log.Printf("RPCs so far: %s", counter)
		}
	}()
	server.Main(server.Options{KitexOptions: KitexOptions(counter, log.Printf, 100*time.Millisecond)})
}
