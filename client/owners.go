package client

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/segment"
)

// ORDERED routing.
//
// An ORDERED (or SLOW_ORDERED) request, one with a sub key, is served by the
// owner of the sub key's shard (segment.Shard: Java's
// Math.abs(subKey.hashCode()) % 64). Any node accepts it and forwards it to
// the owner, at the cost of one internal hop; so the client learns the
// shard-to-owner map (the OrderedOwners RPC) and sends each ORDERED request
// to the owner first:
//
//   - the map is fetched from a known node, with Config.Token, on the first
//     ORDERED call. The calls made before the first fetch ends wait for it,
//     at most ownersFirstWait (and within their own deadline), so that they
//     too go to the owner: not waiting sent the first ~10 ms of calls of
//     every client through a forwarding node. A fetch that fails or takes
//     longer leaves them routed as any other;
//   - it is refreshed every ownersEvery while ORDERED calls are being made,
//     and shortly (ownersSoon) after the owner failed an ORDERED attempt
//     with a retryable error or any node refused one with
//     SEGMENT_UNAVAILABLE. The refresher idles when
//     no ORDERED call was made in a period, and stops with Close;
//   - the owner is tried first only when its address (what the node
//     advertises: the host:port of the ZooKeeper member znodes) is one of
//     the nodes the client already knows (Config.Addrs or the members), is
//     not backed off, and the map is younger than ownersMaxAge. The client
//     never dials an address only because the map names it: a node missing
//     from the known list (or listed under another spelling, a host name
//     where the node advertises an IP) is simply not preferred;
//   - on any retryable error of the owner the call goes on in the normal
//     pick and failover order (the owner is then "tried" and backed off as
//     any failed node); the request_id is the same on every attempt.
//
// A node that does not implement OrderedOwners (an older server: it answers
// an error) leaves the client without a map: every call is routed as before.
// A Conn that lacks the OrderedOwners method (test fakes, custom Dial) is
// never asked.

// Refresher timing.
const (
	ownersEvery  = 2 * time.Second        // refresh period while ORDERED calls are made
	ownersSoon   = 100 * time.Millisecond // refresh delay after an owner failure
	ownersMaxAge = 10 * time.Second       // an older map is not used
	ownersTries  = 2                      // nodes asked per refresh
	// ownersFirstWait bounds how long the calls made before the first map
	// wait for it: a few round trips on a LAN, so a node that does not
	// answer costs the first calls little.
	ownersFirstWait = 200 * time.Millisecond
)

// ownersConn is the optional part of a Conn that serves the owner map: the
// Kitex client generated in kitex_gen/idgen/idgenservice has it.
type ownersConn interface {
	OrderedOwners(ctx context.Context, req *idl.OrderedOwnersRequest, opts ...callopt.Option) (*idl.OrderedOwnersResponse, error)
}

// ownerMap is one fetched shard-to-owner map.
type ownerMap struct {
	addrs [segment.OrderedShards]string // "" = no owner
	at    time.Time                     // when it was fetched (Config.Now)
}

// owners is the client's ORDERED routing state.
type owners struct {
	m atomic.Pointer[ownerMap]

	mu      sync.Mutex // guards the refresher start against Close
	closed  bool
	started atomic.Bool

	used atomic.Bool   // an ORDERED call was made since the last refresh
	idle atomic.Bool   // the refresher waits for wake
	wake chan struct{} // an ORDERED call after an idle period
	soon chan struct{} // an owner failure: refresh shortly
	next atomic.Uint64 // round-robin start of the refresh's node choice

	every, soonDelay time.Duration // ownersEvery, ownersSoon; tests shorten them
	firstWait        time.Duration // ownersFirstWait; tests change it

	// first is closed when the first fetch has ended (with a map or
	// without) or the client closes: calls before it wait (routeOrdered).
	first     chan struct{}
	firstOnce sync.Once

	toOwner, elsewhere, fallbacks atomic.Uint64
}

func (o *owners) init() {
	o.wake = make(chan struct{}, 1)
	o.soon = make(chan struct{}, 1)
	o.every, o.soonDelay, o.firstWait = ownersEvery, ownersSoon, ownersFirstWait
	o.first = make(chan struct{})
}

// firstDone releases the calls waiting for the first map.
func (o *owners) firstDone() { o.firstOnce.Do(func() { close(o.first) }) }

// awaitFirst waits until the first fetch has ended, at most firstWait and
// within ctx.
func (o *owners) awaitFirst(ctx context.Context) {
	select {
	case <-o.first:
		return
	default:
	}
	t := time.NewTimer(o.firstWait)
	defer t.Stop()
	select {
	case <-o.first:
	case <-t.C:
	case <-ctx.Done():
	}
}

// close keeps the refresher from starting: Close calls it before waiting
// for the background work.
func (o *owners) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.firstDone()
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Stats are counters of the client since New, for tests and metrics.
type Stats struct {
	// OrderedToOwner counts ORDERED calls (those with a sub key) whose first
	// attempt went to the shard's owner named by the owner map.
	OrderedToOwner uint64
	// OrderedElsewhere counts ORDERED calls whose first attempt went to a
	// node of the normal pick: no map yet (or the servers do not serve
	// one), a map older than 10s, no owner for the shard, an owner that is
	// not one of the known nodes, or an owner backed off after a failure.
	OrderedElsewhere uint64
	// OrderedOwnerFallbacks counts the ORDERED calls of OrderedToOwner
	// whose attempt at the owner failed with a retryable error: the call
	// then goes on in the normal order, within its retry budget.
	OrderedOwnerFallbacks uint64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		OrderedToOwner:        c.ords.toOwner.Load(),
		OrderedElsewhere:      c.ords.elsewhere.Load(),
		OrderedOwnerFallbacks: c.ords.fallbacks.Load(),
	}
}

// routeOrdered returns the node to try first for req: the owner of its sub
// key's shard, or nil (no sub key, or no usable owner). For an ORDERED
// request it counts the call in Stats and keeps the refresher going;
// before the first map it waits for it (awaitFirst).
func (c *Client) routeOrdered(ctx context.Context, req *idl.NextIDsRequest) *node {
	if req.SubKey == nil || *req.SubKey == "" {
		return nil
	}
	c.ords.touch(c)
	if c.ords.m.Load() == nil {
		c.ords.awaitFirst(ctx)
	}
	nd := c.ownerNode(*req.SubKey, c.cfg.Now())
	if nd == nil {
		c.ords.elsewhere.Add(1)
	} else {
		c.ords.toOwner.Add(1)
	}
	return nd
}

// ownerFailed notes a failed ORDERED attempt. A retryable error of the
// owner (tried first) counts as a fallback: the call goes on elsewhere.
// That, and a SEGMENT_UNAVAILABLE refusal from any node, asks for a
// refresh soon: ownership may have moved.
func (c *Client) ownerFailed(atOwner, again bool, err error) {
	switch {
	case atOwner && again:
		c.ords.fallbacks.Add(1)
	case Code(err) == ErrSegmentUnavailable:
	default:
		return
	}
	poke(c.ords.soon)
}

// ownerNode returns the known node that owns subKey's shard per the map,
// when it may be asked now.
func (c *Client) ownerNode(subKey string, now time.Time) *node {
	m := c.ords.m.Load()
	if m == nil || now.Sub(m.at) > ownersMaxAge {
		return nil
	}
	addr := m.addrs[segment.Shard(subKey)]
	if addr == "" {
		return nil
	}
	list := *c.nodes.Load() // sorted by addr (setAddrs)
	i := sort.Search(len(list), func(i int) bool { return list[i].addr >= addr })
	if i == len(list) || list[i].addr != addr {
		return nil
	}
	nd := list[i]
	if nd.until.Load() > now.UnixNano() {
		return nil
	}
	return nd
}

// touch starts the refresher on the first ORDERED call and wakes it when
// it idles.
func (o *owners) touch(c *Client) {
	if !o.started.Load() {
		o.mu.Lock()
		if !o.started.Load() && !o.closed {
			o.started.Store(true)
			c.wg.Add(1)
			go c.refreshOwners()
		}
		o.mu.Unlock()
		return
	}
	if !o.used.Load() {
		o.used.Store(true)
		if o.idle.Load() && o.idle.CompareAndSwap(true, false) {
			poke(o.wake)
		}
	}
}

// refreshOwners fetches the map now and again until Close.
func (c *Client) refreshOwners() {
	defer c.wg.Done()
	defer c.ords.firstDone()
	for {
		c.ords.used.Store(false)
		c.loadOwners()
		c.ords.firstDone()
		if !c.waitOwners() {
			return
		}
	}
}

// waitOwners waits until the next refresh is due: a period if ORDERED calls
// were made in it, else the next ORDERED call; soonDelay after an owner
// failure. False when the client is closed.
func (c *Client) waitOwners() bool {
	o := &c.ords
	t := time.NewTimer(o.every)
	defer t.Stop()
	select {
	case <-c.bg.Done():
		return false
	case <-o.soon:
		t.Reset(o.soonDelay)
		select {
		case <-c.bg.Done():
			return false
		case <-t.C:
			return true
		}
	case <-t.C:
	}
	if o.used.Load() {
		return true
	}
	// Idle. An ORDERED call sets used and then wakes an idle refresher;
	// the refresher sets idle and then reads used: one of them sees the
	// other. A stale wake costs one extra refresh.
	select {
	case <-o.wake:
	default:
	}
	o.idle.Store(true)
	if !o.used.Load() {
		select {
		case <-c.bg.Done():
			return false
		case <-o.wake:
		case <-o.soon:
		}
	}
	o.idle.Store(false)
	return true
}

// loadOwners asks up to ownersTries known nodes (that serve the map and
// are not backed off) for the owner map and keeps the first answer. On
// failure the last map stays, until it is too old to be used. The nodes'
// back-off is not touched: an error here says nothing about NextIDs.
func (c *Client) loadOwners() {
	list := *c.nodes.Load()
	n := uint64(len(list))
	if n == 0 {
		return
	}
	req := &idl.OrderedOwnersRequest{}
	if c.cfg.Token != "" {
		req.Token = &c.cfg.Token
	}
	now := c.cfg.Now().UnixNano()
	start := c.ords.next.Add(1)
	for i, tries := uint64(0), 0; i < n && tries < ownersTries; i++ {
		nd := list[(start+i)%n]
		oc, ok := nd.conn.(ownersConn)
		if !ok || nd.until.Load() > now {
			continue
		}
		tries++
		ctx, cancel := context.WithTimeout(c.bg, c.cfg.RPCTimeout)
		resp, err := oc.OrderedOwners(ctx, req)
		cancel()
		if c.bg.Err() != nil {
			return
		}
		if err != nil || resp == nil {
			continue
		}
		m := &ownerMap{at: c.cfg.Now()}
		var epochs [segment.OrderedShards]int64
		for _, so := range resp.Owners {
			if so == nil || so.Shard < 0 || so.Shard >= segment.OrderedShards {
				continue
			}
			if m.addrs[so.Shard] == "" || so.Epoch >= epochs[so.Shard] {
				m.addrs[so.Shard], epochs[so.Shard] = so.Addr, so.Epoch
			}
		}
		c.ords.m.Store(m)
		return
	}
}
