package zkstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/storetest"
)

func testZK(t *testing.T) string {
	addr := os.Getenv("IDGEN_TEST_ZK")
	if addr == "" {
		t.Skip("IDGEN_TEST_ZK not set: run ./build.sh test (it starts ZooKeeper)")
	}
	return addr
}

func open(t *testing.T, addr, cluster string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Servers: []string{addr}, Root: "/idgen-zkstore-test", Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestIntegration_Conformance(t *testing.T) {
	addr := testZK(t)
	cluster := fmt.Sprintf("c%d", rand.Uint32())
	storetest.RunBiz(t, func(t *testing.T) segment.Store { return open(t, addr, cluster) })
}

// TestIntegration_SharedAndRefusesCounters (issue 9 item 1): a business
// created through one node's store is seen through another's, concurrent
// updates of different fields from two nodes both take effect, and
// reservations are refused naming --mysql.
func TestIntegration_SharedAndRefusesCounters(t *testing.T) {
	addr := testZK(t)
	cluster := fmt.Sprintf("c%d", rand.Uint32())
	a, b := open(t, addr, cluster), open(t, addr, cluster)
	ctx := context.Background()
	if _, err := a.CreateBiz(ctx, segment.Biz{Name: "order", Channel: segment.ChannelSnowflake}); err != nil {
		t.Fatal(err)
	}
	got, err := b.GetBiz(ctx, "order")
	if err != nil || got.Name != "order" || got.Channel != segment.ChannelSnowflake {
		t.Fatalf("node b sees %+v, %v", got, err)
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			rl := 100 + i
			if _, err := a.UpdateBiz(ctx, "order", segment.BizUpdate{RateLimit: &rl}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			d := fmt.Sprintf("d%d", i)
			if _, err := b.UpdateBiz(ctx, "order", segment.BizUpdate{Description: &d}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, _ = a.GetBiz(ctx, "order")
	if got.RateLimit < 100 || !strings.HasPrefix(got.Description, "d") {
		t.Fatalf("a concurrent update was lost: %+v", got)
	}
	if _, err := a.ReserveSegment(ctx, "order", 10); !errors.Is(err, segment.ErrNoSegments) || !strings.Contains(err.Error(), "--mysql") {
		t.Fatalf("ReserveSegment: %v, want ErrNoSegments naming --mysql", err)
	}
	if _, err := a.ReserveOrdered(ctx, segment.OrderedRequest{Biz: "order", SubKey: "k", Count: 1}); !errors.Is(err, segment.ErrNoSegments) {
		t.Fatalf("ReserveOrdered: %v, want ErrNoSegments", err)
	}
}

// TestUnreachableAnswersInTime: with nothing listening, calls fail with
// ErrUnavailable within the timeout instead of hanging.
func TestUnreachableAnswersInTime(t *testing.T) {
	s, err := Open(context.Background(), Config{Servers: []string{"127.0.0.1:1"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetBiz(context.Background(), "x"); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// TestIntegration_SharedSession: a store given the node's session uses it
// (its calls go through the session's client) and leaves it open when it
// closes; calls after the session closed fail fast with ErrUnavailable.
func TestIntegration_SharedSession(t *testing.T) {
	addr := testZK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zs, err := zksession.Open(ctx, zksession.Config{Servers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer zs.Close()
	s, err := Open(ctx, Config{Session: zs, Root: "/idgen-zkstore-test", Cluster: fmt.Sprintf("c%d", rand.Uint32())})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateBiz(ctx, segment.Biz{Name: "shared", Channel: segment.ChannelSnowflake}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBiz(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if v := zs.View(); !v.Has || v.Closed {
		t.Fatalf("the shared session after the store closed: %+v", v)
	}
	s2, err := Open(ctx, Config{Session: zs, Root: "/idgen-zkstore-test", Cluster: "c"})
	if err != nil {
		t.Fatal(err)
	}
	zs.Close()
	if _, err := s2.GetBiz(ctx, "shared"); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("after the session closed: %v, want ErrUnavailable", err)
	}
}
