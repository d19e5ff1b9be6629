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
//
// The example's own lines go through zap, as JSON lines on stderr in the
// node's format (the logger "embed"), so that they read like the node's
// and a log shipper parses every line: never the standard log package,
// whose plain text lines would break the JSON stream.
package main

import (
	"context"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/endpoint"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"
	kserver "github.com/cloudwego/kitex/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idgen/idgen/server"
)

// SlowCalls is a Kitex middleware that logs every call that takes longer
// than threshold, at warn (a slow call is worth a look), with its method,
// duration and error.
func SlowCalls(log *zap.Logger, threshold time.Duration) endpoint.Middleware {
	return func(next endpoint.Endpoint) endpoint.Endpoint {
		return func(ctx context.Context, req, resp any) error {
			start := time.Now()
			err := next(ctx, req, resp)
			if d := time.Since(start); d > threshold {
				log.Warn("slow RPC", zap.String("method", method(ctx)), zap.Duration("took", d), zap.Error(err))
			}
			return err
		}
	}
}

// RPCCounter is a stats.Tracer: it counts the RPCs that finished, per
// method, and logs those that failed in Kitex (transport, codec, a
// panic) with how long they took.
type RPCCounter struct {
	log *zap.Logger

	mu    sync.Mutex
	calls map[string]int64
}

var _ stats.Tracer = (*RPCCounter)(nil)

// NewRPCCounter returns an RPCCounter that logs through log.
func NewRPCCounter(log *zap.Logger) *RPCCounter {
	return &RPCCounter{log: log, calls: map[string]int64{}}
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
	c.log.Warn("RPC failed in Kitex", zap.String("method", m), zap.Duration("took", took), zap.Error(st.Error()))
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
func KitexOptions(counter *RPCCounter, log *zap.Logger, slow time.Duration) []kserver.Option {
	return []kserver.Option{
		kserver.WithMiddleware(SlowCalls(log, slow)),
		kserver.WithTracer(counter),
	}
}

// newLogger returns the example's logger: JSON lines on w in the encoding
// of the node's own (zap's production encoder, ISO 8601 times), at info,
// named "embed". The node builds its logger inside server.Run from its
// flags and does not hand it out, so with --log-format console the
// node's lines are text and these stay JSON.
func newLogger(w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), zapcore.InfoLevel)).Named("embed")
}

func main() {
	log := newLogger(os.Stderr)
	counter := NewRPCCounter(log)
	go func() {
		for range time.Tick(time.Minute) {
			log.Info("RPCs so far", zap.Stringer("calls", counter))
		}
	}()
	server.Main(server.Options{KitexOptions: KitexOptions(counter, log, 100*time.Millisecond)})
}
