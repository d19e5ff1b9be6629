package ordered

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idgen/idgen/segment"
)

// Simulator seed 1120: a planned hand-off's exact write-back stalled
// across a lossy MySQL failover. Meanwhile a later owner B claimed the
// shard at epoch 2 and answered above A's counter; the failover lost B's
// claim (the new server's fence says epoch 1 again), and B's barrier
// raised its answers on the new server. A's write-back then passed the
// epoch-1 fence and lowered the row below B's answers: the next owner
// repeated them. Fixed: a term's exact write-back is refused when the
// gate closed since the term was granted (a gap, never a repeat), and
// Release reports ErrUncleanHandOff.
// Negative control: IDGEN_FAULT_WRITEBACK_ACROSS_FAILOVER=1.
func TestWriteBackRefusedAfterServerChange(t *testing.T) {
	for _, control := range []bool{false, true} {
		if control && !faultInjectBuild {
			continue
		}
		name := "fixed"
		if control {
			name = "control"
		}
		t.Run(name, func(t *testing.T) {
			if control {
				t.Setenv("IDGEN_FAULT_WRITEBACK_ACROSS_FAILOVER", "1")
			}
			store, clk, g := newFakeStore(), newFakeClock(), newFakeGate()
			key := Key{"chat", "k"}
			s := segment.Shard(key.SubKey)
			var bTop int64
			var a *Allocator
			hooked := 0
			// A's write-back is held here (the simulator's stall) while
			// B takes over and the MySQL server changes.
			stall := func(shard int) {
				if shard != s {
					return
				}
				hooked++
				store.mu.Lock()
				before := map[Key]int64{key: store.rows[key]} // the replica: A's reservation end, epoch 1
				// B claims epoch 2 and answers above A's counter.
				store.epochs[s], store.owners[s] = 2, "b:1"
				bTop = store.rows[key] + 100
				store.rows[key] = bTop
				store.mu.Unlock()
				// A lossy failover to the replica: B's claim and row lost.
				g.close()
				store.lossyFailover(before)
				store.mu.Lock()
				store.epochs[s], store.owners[s] = 1, "a:1"
				// The barrier: B raises what it answered, A what it
				// remembers; the gate opens again.
				store.rows[key] = max(store.rows[key], bTop)
				store.mu.Unlock()
				store.flush(a)
				g.reopen()
			}
			coord := newFakeCoord("a:1", clk.Now().Add(time.Hour))
			var err error
			core, logs := observer.New(zapcore.WarnLevel)
			a, err = New(Config{Store: store, Coordinator: coord, Clock: clk, Self: "a:1", Gate: g, BeforeWriteBack: stall, Logger: zap.New(core)})
			if err != nil {
				t.Fatal(err)
			}
			n := &node{a: a, coord: coord}
			n.acquireAll(t, 1, time.Time{})
			last := cachedTraffic(t, n, clk, bizMode("chat", segment.OrderedCached), key.SubKey, 500)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = a.Release(ctx, s)
			if hooked != 1 {
				t.Fatalf("the write-back hook ran %d times, want 1 (no exact counters to write back?)", hooked)
			}
			row := store.row(key)
			if control {
				if err != nil || row != last {
					t.Fatalf("negative control: Release = %v, row %d: want the row lowered to A's exact %d (B answered up to %d)", err, row, last, bTop)
				}
				return
			}
			if row < bTop {
				t.Fatalf("row after the hand-off %d, below %d that B answered: A's stale write-back lowered it (A's counter %d)", row, bTop, last)
			}
			if !errors.Is(err, ErrUncleanHandOff) || !errors.Is(err, errServerChangedSinceTerm) {
				t.Fatalf("Release = %v, want ErrUncleanHandOff (server changed since the term)", err)
			}
			if got := a.Stats().UncleanHandOffs; got != 1 {
				t.Fatalf("UncleanHandOffs = %d, want 1", got)
			}
			if n := logs.FilterMessageSnippet("MySQL server changed").Len(); n != 1 {
				t.Fatalf("%d WARN lines naming the server change, want 1: %v", n, logs.All())
			}
		})
	}
}
