package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idgen/idgen/faults/checker"
)

// Caller is one sequential load goroutine: a node, a business, a channel
// (and a sub key on ORDERED), a batch size range.
type Caller struct {
	Name     string
	Node     *Node
	Biz      string
	Channel  int32
	SubKey   string
	MinCount int32
	MaxCount int32
	// SubKeys, when set, are the ORDERED sub keys the caller spreads its
	// calls over (one drawn per call, SubKey ignored): many cold keys
	// from one goroutine.
	SubKeys []string
	// Hold, when set, pauses the caller between two calls while it is
	// held (Hold.Pause).
	Hold *Hold
}

// Load drives NextIDs from one goroutine per caller and records every call.
type Load struct {
	Pace    time.Duration // pause between two calls of one caller
	Timeout time.Duration // per call

	mu    sync.Mutex
	calls []checker.Call
	stop  chan struct{}
	wg    sync.WaitGroup
	n     atomic.Int64
}

// StartLoad starts the callers; seed makes batch sizes reproducible.
func StartLoad(callers []Caller, pace time.Duration, seed uint64) *Load {
	l := &Load{Pace: pace, Timeout: 3 * time.Second, stop: make(chan struct{})}
	for i, c := range callers {
		l.wg.Add(1)
		go l.run(c, rand.New(rand.NewPCG(seed, uint64(i))))
	}
	return l
}

func (l *Load) run(c Caller, rng *rand.Rand) {
	defer l.wg.Done()
	cl := &Client{Addr: c.Node.RPCAddr, Timeout: l.Timeout}
	defer cl.Close()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		if c.Hold != nil && !c.Hold.enter(l.stop) {
			return
		}
		count := c.MinCount
		if c.MaxCount > c.MinCount {
			count += rng.Int32N(c.MaxCount - c.MinCount + 1)
		}
		subKey := c.SubKey
		if len(c.SubKeys) > 0 {
			subKey = c.SubKeys[rng.IntN(len(c.SubKeys))]
		}
		rec := checker.Call{Caller: c.Name, Node: c.Node.Name, Biz: c.Biz, SubKey: subKey, Channel: ChannelName(c.Channel), Count: count}
		inc := c.Node.Inc()
		rec.Start = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), l.Timeout)
		a, err := cl.NextIDs(ctx, c.Biz, c.Channel, count, subKey)
		cancel()
		rec.End = time.Now()
		if c.Hold != nil {
			c.Hold.leave()
		}
		if inc2 := c.Node.Inc(); inc2 != inc {
			inc = -1 // restarted meanwhile: which process answered is unknown
		}
		rec.Inc = inc
		wait := l.Pace
		switch {
		case err == nil:
			rec.Ranges, rec.Served, rec.Fallback = a.Ranges, ChannelName(a.Channel), a.Fallback
		default:
			if r, ok := AsRefusal(err); ok {
				rec.Err = r
				if d := time.Duration(r.RetryAfterMs) * time.Millisecond; d > wait {
					wait = min(d, 100*time.Millisecond)
				}
			} else {
				rec.Transport = err.Error()
				wait = max(wait, 50*time.Millisecond)
			}
		}
		l.mu.Lock()
		l.calls = append(l.calls, rec)
		l.mu.Unlock()
		l.n.Add(1)
		select {
		case <-l.stop:
			return
		case <-time.After(wait):
		}
	}
}

// Add starts more callers (for a node started during the run).
func (l *Load) Add(callers []Caller, seed uint64) {
	for i, c := range callers {
		l.wg.Add(1)
		go l.run(c, rand.New(rand.NewPCG(seed, uint64(1000+i))))
	}
}

// Count returns how many calls were recorded so far.
func (l *Load) Count() int64 { return l.n.Load() }

// OKSince counts successful calls of a node answered after t.
func (l *Load) OKSince(node string, t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := len(l.calls) - 1; i >= 0 && l.calls[i].End.After(t); i-- {
		if c := &l.calls[i]; c.Node == node && c.OK() {
			n++
		}
	}
	return n
}

// Stop stops the callers and returns the history.
func (l *Load) Stop() []checker.Call {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// StandardCallers returns, for each node, one SNOWFLAKE caller (business
// biz, which allows fallback), one UNORDERED caller and ORDERED callers on
// shared sub keys, so ORDERED's real-time order is checked across nodes.
func StandardCallers(nodes []*Node, biz string, orderedKeys int) []Caller {
	var cs []Caller
	for _, n := range nodes {
		cs = append(cs,
			Caller{Name: n.Name + "/sf", Node: n, Biz: biz, Channel: ChSnowflake, MinCount: 1, MaxCount: 64},
			Caller{Name: n.Name + "/un", Node: n, Biz: biz, Channel: ChUnordered, MinCount: 1, MaxCount: 64})
		for k := range orderedKeys {
			cs = append(cs, Caller{Name: fmt.Sprintf("%s/ord%d", n.Name, k), Node: n, Biz: biz, Channel: ChOrdered,
				SubKey: fmt.Sprintf("k%d", k), MinCount: 1, MaxCount: 4})
		}
	}
	return cs
}

// SnowflakeCallers returns one SNOWFLAKE caller per node on biz, a business
// without fallback: its refusals are what a SNOWFLAKE caller that cannot
// take segment IDs would see, which a business with fallback hides.
func SnowflakeCallers(nodes []*Node, biz string) []Caller {
	var cs []Caller
	for _, n := range nodes {
		cs = append(cs, Caller{Name: n.Name + "/sfnf", Node: n, Biz: biz, Channel: ChSnowflake, MinCount: 1, MaxCount: 64})
	}
	return cs
}

// Since returns a copy of the calls answered (or failed) after t.
func (l *Load) Since(t time.Time) []checker.Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := len(l.calls)
	for i > 0 && l.calls[i-1].End.After(t) {
		i--
	}
	return append([]checker.Call(nil), l.calls[i:]...)
}
