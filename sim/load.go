package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// subKeys are the ORDERED sub keys of the load; loadShards their shards.
var (
	subKeys    = []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	loadShards = func() map[int]bool {
		m := map[int]bool{}
		for _, k := range subKeys {
			m[segment.Shard(k)] = true
		}
		return m
	}()
)

// caller is one sequential client: it sends requests of every channel to
// random nodes until ctx ends. A gapless ORDERED request carries a request
// id half of the time and is retried with it after a failure; now and then
// a caller replays an id that was answered, which must return the same
// range.
func (c *cluster) caller(ctx context.Context, name string, rng *rand.Rand, rec *recorder) {
	seq := 0
	for ctx.Err() == nil {
		seq++
		req := issuer.Request{Count: 1 + rng.IntN(5)}
		var ch segment.Channel
		replay := false
		switch p := rng.IntN(100); {
		case p < 30:
			req.Biz, ch = bizSnowflake, segment.ChannelSnowflake
		case p < 50:
			req.Biz, ch = bizUnordered, segment.ChannelUnordered
		case p < 75:
			req.Biz, ch = bizCached, segment.ChannelOrdered
			req.SubKey = subKeys[rng.IntN(len(subKeys))]
		default:
			req.Biz, ch = bizGapless, segment.ChannelOrdered
			req.SubKey = subKeys[rng.IntN(len(subKeys))]
			if rng.IntN(2) == 0 {
				req.RequestID = fmt.Sprintf("%s-%d", name, seq)
			}
			if rng.IntN(10) == 0 {
				if rid, a, ok := rec.pick(rng); ok {
					req.RequestID, req.SubKey, req.Count, replay = rid, a.subKey, a.count, true
				}
			}
		}
		req.Channel = &ch
		attempts := 1
		if req.RequestID != "" {
			attempts = 3
		}
		var first time.Time
		for a := 0; a < attempts && ctx.Err() == nil; a++ {
			call, ok := c.send(rng, name, req)
			if a == 0 {
				first = call.Start
			} else {
				// A retry with the request id may return what the first
				// attempt stored: the call began with the first attempt.
				call.Start = first
			}
			if call.Transport != "" || call.Err != nil {
				if call.Transport != "" {
					time.Sleep(5 * time.Millisecond)
				}
				continue
			}
			if !ok {
				break
			}
			if req.RequestID != "" && !rec.answered(req.RequestID, ridAnswer{server: c.db.serverID(), subKey: req.SubKey, count: req.Count, ranges: call.Ranges}, call.String()) {
				break // a replay: checked, not counted twice
			}
			if !replay {
				rec.add(call)
			}
			break
		}
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
}

// send sends req to a random node, forwarding an ORDERED request to the
// shard's owner as the RPC handler does (at most twice). ok is false when
// the call got no IDs.
func (c *cluster) send(rng *rand.Rand, caller string, req issuer.Request) (checker.Call, bool) {
	if in := c.intruder; *req.Channel == segment.ChannelOrdered && in.isUp() && rng.IntN(4) == 0 {
		// A client of the other cluster: the same businesses (one
		// database), its own cluster's node.
		return c.sendTo(rng, in, caller, req)
	}
	return c.sendTo(rng, c.nodes[rng.IntN(len(c.nodes))], caller, req)
}

// sendTo is send to node n.
func (c *cluster) sendTo(_ *rand.Rand, n *node, caller string, req issuer.Request) (checker.Call, bool) {
	chName := map[segment.Channel]string{segment.ChannelSnowflake: checker.Snowflake, segment.ChannelUnordered: checker.Unordered,
		segment.ChannelOrdered: checker.Ordered}[*req.Channel]
	call := checker.Call{Caller: caller, Biz: req.Biz, SubKey: req.SubKey, Channel: chName, Count: int32(req.Count), Start: time.Now()}
	for hop := 0; hop < 3; hop++ {
		n.mu.Lock()
		call.Node, call.Inc = n.addr, n.inc
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		resp, err, up := n.serve(ctx, req)
		cancel()
		call.End = time.Now()
		if !up {
			// Connection refused, or the node died before answering: the
			// outcome is unknown.
			call.Transport = "node down"
			return call, false
		}
		var ue *ordered.UnavailableError
		if err != nil && errors.As(err, &ue) && ue.NotOwner && ue.Owner.Addr != "" && c.byAdr[ue.Owner.Addr] != nil && hop < 2 {
			n = c.byAdr[ue.Owner.Addr]
			continue
		}
		if err != nil {
			call.Err = &checker.Refusal{Code: -1, Message: err.Error()}
			return call, false
		}
		call.Served = map[segment.Channel]string{segment.ChannelSnowflake: checker.Snowflake, segment.ChannelUnordered: checker.Unordered,
			segment.ChannelOrdered: checker.Ordered}[resp.Channel]
		call.Fallback = resp.Fallback
		for _, r := range resp.Ranges {
			call.Ranges = append(call.Ranges, [2]int64{r.First, r.Last})
		}
		return call, len(call.Ranges) > 0
	}
	call.Err = &checker.Refusal{Code: -1, Message: "forwarded too often"}
	return call, false
}

// probeWait is how long after the last fault ended every node must serve
// every channel again: many leases, sessions and heartbeats of the scaled
// timings (node.go), so only a node that does not recover by itself
// fails it.
const probeWait = 5 * time.Second

// probe asks every node for every channel (and an ORDERED key on every
// shard's owner, through the forwarding) until each answered, or wait
// passed. It returns what never answered: availability holes (a client
// that never reconnects, a guard that never reopens). Its answers are
// recorded in rec and checked with the load's: a seed whose faults keep
// ORDERED refused past the end of the load (a barrier waiting for a
// killed member's bound) would otherwise hide what the nodes answer once
// they serve again (seed 1120: the repeats came after the load stopped).
func (c *cluster) probe(wait time.Duration, rec *recorder) []string {
	type ask struct {
		biz string
		ch  segment.Channel
		sub string
	}
	asks := []ask{{bizSnowflake, segment.ChannelSnowflake, ""}, {bizUnordered, segment.ChannelUnordered, ""}}
	for i := range 8 {
		asks = append(asks, ask{bizCached, segment.ChannelOrdered, fmt.Sprintf("k%d", i)}, ask{bizGapless, segment.ChannelOrdered, fmt.Sprintf("k%d", i)})
	}
	deadline := time.Now().Add(wait)
	var stuck []string
	for _, n := range c.nodes {
		for _, a := range asks {
			ch := a.ch
			req := issuer.Request{Biz: a.biz, Channel: &ch, SubKey: a.sub, Count: 1}
			var last string
			for {
				rng := rand.New(rand.NewPCG(1, 2))
				call, ok := c.sendTo(rng, n, "probe", req)
				if ok {
					rec.add(call)
					last = ""
					break
				}
				last = call.Transport
				if call.Err != nil {
					last = call.Err.Message
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if last != "" {
				stuck = append(stuck, fmt.Sprintf("%s %s %s/%s: not served %v after the last fault: %s", n.addr, ch, a.biz, a.sub, wait, last))
			}
		}
	}
	return stuck
}
