package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestMeasure_StatusFlood measures what 32 clients reloading /status as
// fast as they can cost a node (issue 30, item 5): pages served and the
// node's CPU (process_cpu_seconds_total) over 5 s. It asserts nothing
// (IDGEN_MEASURE=1 only); the same file runs against older code, which
// ignores the token.
func TestMeasure_StatusFlood(t *testing.T) {
	measuring(t)
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	n.WaitSnowflake(t, 30*time.Second)
	c := n.Client(t)
	ctx := context.Background()
	for i := range 50 {
		if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: fmt.Sprintf("biz-%02d", i), Description: ptr("a business of the flood")}); err != nil {
			t.Fatal(err)
		}
	}
	cpu := func() float64 {
		_, body, err := n.Get(ctx, "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, "process_cpu_seconds_total "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		t.Fatal("no process_cpu_seconds_total")
		return 0
	}
	const readers, span = 32, 5 * time.Second
	tr := &http.Transport{MaxIdleConnsPerHost: readers}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	// pace 0: each reader reloads as soon as it has the page (a flood);
	// else once per pace (a browser's reload loop).
	for _, pace := range []time.Duration{50 * time.Millisecond, 0} {
		var pages, fails atomic.Int64
		before, start := cpu(), time.Now()
		var wg sync.WaitGroup
		for range readers {
			wg.Go(func() {
				for next := time.Now(); time.Since(start) < span; next = next.Add(pace) {
					time.Sleep(time.Until(next))
					req, _ := http.NewRequest(http.MethodGet, "http://"+n.AdminAddr+"/status", nil)
					req.Header.Set("Authorization", "Bearer "+n.AdminToken)
					resp, err := hc.Do(req)
					if err != nil {
						fails.Add(1)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						pages.Add(1)
					} else {
						fails.Add(1)
					}
				}
			})
		}
		wg.Wait()
		wall := time.Since(start).Seconds()
		used := cpu() - before
		what := "flood"
		if pace > 0 {
			what = "each every " + pace.String()
		}
		line := fmt.Sprintf("MEASURE /status, %d readers %s: %.0f pages/s, node CPU %.2f cores, %.3f ms per page, %d failed",
			readers, what, float64(pages.Load())/wall, used/wall, 1000*used/float64(max(pages.Load(), 1)), fails.Load())
		t.Log(line)
		fmt.Println(line)
	}
}
