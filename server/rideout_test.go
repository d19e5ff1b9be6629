package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRideOutWakesAtTheShardsChange: a pause of the ride-out ends when the
// shard changes on this node, not at its timer (issue 31: a new node's
// first ORDERED answer came up to a back-off step, 80 ms, after its shard
// was claimed). The timer here never fires: without the wake-up the
// ride-out would wait until the context ends.
func TestRideOutWakesAtTheShardsChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang, not a timing
	defer cancel()
	never := func(time.Duration) <-chan time.Time { return nil }
	wake := make(chan struct{})
	var serving bool
	tries := 0
	w := &fakeShardWatch{ch: wake}
	refused := errors.New("shard in transition")
	out, err := rideOutAfter(ctx, never, w, "k", func() (int, bool, error) {
		tries++
		if serving {
			return 7, false, nil
		}
		// The shard starts serving right after this try looked: the
		// channel taken before the try is what tells the ride-out.
		serving = true
		close(wake)
		return 0, true, refused
	})
	if err != nil || out != 7 {
		t.Fatalf("ride-out: %v, %v (ctx: %v): it did not wake at the shard's change", out, err, ctx.Err())
	}
	if tries != 2 || w.calls != 2 || w.subKey != "k" {
		t.Fatalf("tries %d, change channels taken %d (of %q), want 2 and 2 (one before each try, of k)", tries, w.calls, w.subKey)
	}
}

// fakeShardWatch hands out ch and counts the calls.
type fakeShardWatch struct {
	ch     chan struct{}
	calls  int
	subKey string
}

func (f *fakeShardWatch) ShardChanged(subKey string) <-chan struct{} {
	f.calls++
	f.subKey = subKey
	return f.ch
}
