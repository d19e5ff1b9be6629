package client_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/cloudwego/kitex/transport"

	"github.com/idgen/idgen/client"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// node starts a standalone idgen node for one top-level benchmark (its
// sub-benchmarks share it).
func node(b *testing.B) string {
	return testnode.Start(b, testnode.Options{DataDir: b.TempDir()}).RPCAddr
}

// latencies records per-call latencies of one goroutine and reports p99.
type latencies []time.Duration

func report(b *testing.B, all []latencies) {
	var l []time.Duration
	for _, x := range all {
		l = append(l, x...)
	}
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	b.ReportMetric(float64(l[len(l)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}

func newClient(b *testing.B, addr string, prefetch bool, conns int) *client.Client {
	cfg := client.Config{Addrs: []string{addr}, MaxIdleConns: conns}
	if prefetch {
		cfg.Prefetch.Bizs = []client.PrefetchBiz{{Biz: "bench", Channel: client.Unordered}}
	}
	c, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// sampleEvery: one call in sampleEvery is timed for the latency figures.
// Reading the clock twice costs about as much as a prefetched Next itself,
// so timing every call would measure the clock; a systematic 1-in-16
// sample estimates the percentiles of the same calls without that cost.
const sampleEvery = 16

// runParallel runs fn on g goroutines for b.N calls in total.
func runParallel(b *testing.B, g int, fn func(ctx context.Context) error) {
	ctx := context.Background()
	all := make([]latencies, g)
	var wg sync.WaitGroup
	per := b.N / g
	b.ResetTimer()
	for w := 0; w < g; w++ {
		n := per
		if w == 0 {
			n += b.N % g
		}
		wg.Go(func() {
			l := make(latencies, 0, n/sampleEvery+1)
			for i := 0; i < n; i++ {
				if i%sampleEvery != 0 {
					if err := fn(ctx); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				t0 := time.Now()
				if err := fn(ctx); err != nil {
					b.Error(err)
					return
				}
				l = append(l, time.Since(t0))
			}
			all[w] = l
		})
	}
	wg.Wait()
	b.StopTimer()
	report(b, all)
}

// BenchmarkNextPrefetch: Next from the prefetch buffer (UNORDERED) against
// one standalone node, on 1 and 16 goroutines.
func BenchmarkNextPrefetch(b *testing.B) {
	addr := node(b)
	for _, g := range []int{1, 16} {
		b.Run(goroutines(g), func(b *testing.B) {
			c := newClient(b, addr, true, g)
			if _, err := c.Next(context.Background(), "bench"); err != nil { // warm the buffer
				b.Fatal(err)
			}
			runParallel(b, g, func(ctx context.Context) error { _, err := c.Next(ctx, "bench"); return err })
		})
	}
}

// BenchmarkNextDirect: Next without prefetch (one RPC per ID) against the
// raw generated Kitex client with the same options, at 16 goroutines.
func BenchmarkNextDirect(b *testing.B) {
	const g = 16
	addr := node(b)
	b.Run("client", func(b *testing.B) {
		c := newClient(b, addr, false, g)
		ch := client.WithChannel(client.Unordered)
		runParallel(b, g, func(ctx context.Context) error { _, err := c.Next(ctx, "bench", ch); return err })
	})
	b.Run("raw-kitex", func(b *testing.B) {
		kc, err := idgenservice.NewClient("idgen", kclient.WithHostPorts(addr), kclient.WithRPCTimeout(time.Second),
			kclient.WithConnectTimeout(500*time.Millisecond), kclient.WithTransportProtocol(transport.TTHeaderFramed),
			kclient.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: g, MaxIdleGlobal: g, MaxIdleTimeout: time.Minute}))
		if err != nil {
			b.Fatal(err)
		}
		ch := idl.Channel_UNORDERED
		runParallel(b, g, func(ctx context.Context) error {
			_, err := kc.NextIDs(ctx, &idl.NextIDsRequest{Biz: "bench", Channel: &ch, Count: 1})
			return err
		})
	})
}

func goroutines(g int) string {
	if g == 1 {
		return "1-goroutine"
	}
	return "16-goroutines"
}
