package server

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"

	"github.com/idgen/idgen/cluster/zksession"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestMeasure_UnitCosts measures the unit costs docs/scale.md derives its
// capacity model from (issue 31, item 7): per 1,000 requests of each channel
// and mode, the ZooKeeper writes (the zxid of a private ZooKeeper, so every
// write of the cluster counts and nothing else does), the MySQL
// transactions, statements and rows, and the RPC bytes in each direction
// (the framed messages as Kitex encodes them, TTHeader included; TCP/IP
// headers are not counted). It also measures what a node costs at rest:
// ZooKeeper writes and MySQL statements per second with no request at all,
// which the per-request ZooKeeper figures leave out (rate at rest times the
// run's length).
//
// MySQL transactions are explicit ones (Com_commit; the stores' writes
// all run in transactions), row writes are the handler's row writes and
// updates (Handler_write + Handler_update + Handler_delete: a row raised
// with INSERT ... ON DUPLICATE KEY UPDATE counts once or twice), statements
// are Questions less the snapshot's own SHOW.
//
// The MySQL figures are the server's global status counters, so the run
// must have the MariaDB server to itself: MEASURE=UnitCosts
// scripts/availability.sh starts its own. Nothing is asserted.
func TestMeasure_UnitCosts(t *testing.T) {
	measuring(t)
	zk, nodes := measureCluster(t, "cost", 1)
	n := nodes[0]
	db, err := sql.Open("mysql", os.Getenv("IDGEN_TEST_MYSQL"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	admin := n.Client(t)
	ctx := context.Background()
	for _, b := range []struct {
		name string
		ch   idl.Channel
		mode string
	}{{"cost-sf", idl.Channel_SNOWFLAKE, ""}, {"cost-un", idl.Channel_UNORDERED, ""},
		{"cost-oc", idl.Channel_ORDERED, "cached"}, {"cost-og", idl.Channel_ORDERED, "gapless"}} {
		req := &idl.CreateBizRequest{Name: b.name, Channel: ch(b.ch)}
		if b.mode != "" {
			req.OrderedMode = ptr(b.mode)
		}
		if _, err := admin.CreateBiz(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	tr := &byteTracer{}
	c := n.BareClient(t, client.WithTracer(tr), client.WithStatsLevel(stats.LevelBase))

	snap := func() costSnapshot {
		st := zksession.SrvrStats([]string{zk.Addr()}, 2*time.Second)[0]
		if st.Err != nil {
			t.Fatalf("srvr: %v", st.Err)
		}
		s := costSnapshot{zxid: st.Zxid, sent: tr.sent.Load(), recv: tr.recv.Load(), calls: tr.calls.Load(), mysql: map[string]int64{}}
		rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_commit','Questions'," +
			"'Handler_write','Handler_update','Handler_delete','Bytes_received','Bytes_sent')")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			s.mysql[k], _ = strconv.ParseInt(v, 10, 64)
		}
		return s
	}

	// At rest: the lease renewals and heartbeats of one node.
	const rest = 6 * time.Second
	a := snap()
	time.Sleep(rest)
	b := snap()
	secs := rest.Seconds()
	zkRest := float64(b.zxid-a.zxid) / secs
	line := fmt.Sprintf("MEASURE unit cost at rest, per node and second: ZooKeeper writes %.2f, MySQL statements %.2f, transactions %.2f",
		float64(b.zxid-a.zxid)/secs, float64(b.mysql["Questions"]-a.mysql["Questions"]-1)/secs,
		float64(b.mysql["Com_commit"]-a.mysql["Com_commit"])/secs)
	t.Log(line)
	fmt.Println(line)

	const callers, requests = 16, 4000
	for _, sc := range []struct {
		name, biz string
		ch        idl.Channel
		keys      int
	}{
		{"SNOWFLAKE", "cost-sf", idl.Channel_SNOWFLAKE, 0},
		{"UNORDERED", "cost-un", idl.Channel_UNORDERED, 0},
		{"ORDERED cached, one hot key", "cost-oc", idl.Channel_ORDERED, 1},
		{"ORDERED cached, 64 keys", "cost-oc", idl.Channel_ORDERED, 64},
		{"ORDERED gapless, one hot key", "cost-og", idl.Channel_ORDERED, 1},
		{"ORDERED gapless, 64 keys", "cost-og", idl.Channel_ORDERED, 64},
	} {
		call := func(i int) error {
			req := &idl.NextIDsRequest{Biz: sc.biz, Channel: ch(sc.ch), Count: 1}
			if sc.keys > 0 {
				req.SubKey = str("k" + strconv.Itoa(i%sc.keys))
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := c.NextIDs(cctx, req)
			return err
		}
		// Warm up: load the keys and segments, so the figures are of the
		// steady state (a first use's load is a per-key cost, not a
		// per-request one).
		for i := range 4 * max(sc.keys, 1) {
			deadline := time.Now().Add(20 * time.Second)
			for call(i) != nil && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
		a := snap()
		start := time.Now()
		var next atomic.Int64
		var failed atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > requests {
						return
					}
					if call(int(i)) != nil {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		b := snap()
		// Less what the node writes at rest meanwhile (lease renewals,
		// heartbeats), so the figure is the requests' own.
		took := time.Since(start).Seconds()
		per := func(d int64) float64 { return float64(d) * 1000 / float64(requests) }
		zkWrites := per(b.zxid-a.zxid) - zkRest*took*1000/requests
		line := fmt.Sprintf("MEASURE unit cost %s, per 1000 requests of 1 ID (%d callers, %d requests, %d failed): "+
			"ZooKeeper writes %.1f, MySQL transactions %.1f, statements %.1f, row writes %.1f, MySQL bytes in %.0f out %.0f, "+
			"RPC bytes request %.0f response %.0f",
			sc.name, callers, requests, failed.Load(),
			max(zkWrites, 0), per(b.mysql["Com_commit"]-a.mysql["Com_commit"]),
			per(b.mysql["Questions"]-a.mysql["Questions"]-1),
			per(b.mysql["Handler_write"]+b.mysql["Handler_update"]+b.mysql["Handler_delete"]-
				a.mysql["Handler_write"]-a.mysql["Handler_update"]-a.mysql["Handler_delete"]),
			per(b.mysql["Bytes_received"]-a.mysql["Bytes_received"]), per(b.mysql["Bytes_sent"]-a.mysql["Bytes_sent"]),
			float64(b.sent-a.sent)*1000/float64(max(b.calls-a.calls, 1)), float64(b.recv-a.recv)*1000/float64(max(b.calls-a.calls, 1)))
		t.Log(line)
		fmt.Println(line)
	}
}

// costSnapshot is what TestMeasure_UnitCosts reads before and after a run.
type costSnapshot struct {
	zxid              int64
	sent, recv, calls int64
	mysql             map[string]int64
}

// byteTracer sums the framed bytes Kitex sent and received per call.
type byteTracer struct {
	sent, recv, calls atomic.Int64
}

func (tr *byteTracer) Start(ctx context.Context) context.Context { return ctx }

func (tr *byteTracer) Finish(ctx context.Context) {
	ri := rpcinfo.GetRPCInfo(ctx)
	if ri == nil || ri.Stats() == nil {
		return
	}
	tr.sent.Add(int64(ri.Stats().SendSize()))
	tr.recv.Add(int64(ri.Stats().RecvSize()))
	tr.calls.Add(1)
}

var _ stats.Tracer = (*byteTracer)(nil)
