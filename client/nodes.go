package client

import (
	"sort"
	"sync/atomic"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/cloudwego/kitex/transport"

	"github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// node is one idgen node and when it may be asked again.
type node struct {
	addr  string
	conn  Conn
	until atomic.Int64 // Unix ns before which the node is not asked (a refusal's retry_after, a back-off)
	fails atomic.Int32 // consecutive failures, for the back-off
}

// Back-off of a node after failures without a retry_after: 50ms doubling
// up to 2s (a crashed node stays listed until its ZooKeeper session ends).
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// block keeps the node out of rotation for after (a refusal's
// retry_after_ms), or a back-off growing with consecutive failures when
// after is 0.
func (n *node) block(now time.Time, after time.Duration) {
	f := n.fails.Add(1)
	if after <= 0 {
		after = minBackoff << min(f-1, 6)
		after = min(after, maxBackoff)
	}
	n.until.Store(now.Add(after).UnixNano())
}

// pick returns a node to ask: the next in round-robin order that is not
// blocked and was not tried in this call; else the one that is free
// soonest and how long until it is.
func (c *Client) pick(tried []*node, now time.Time) (*node, time.Duration) {
	list := *c.nodes.Load()
	n := uint64(len(list))
	if n == 0 {
		return nil, 0
	}
	t := now.UnixNano()
	start := c.rr.Add(1)
	var soonest *node
	var free *node // free but tried already
	for i := uint64(0); i < n; i++ {
		nd := list[(start+i)%n]
		u := nd.until.Load()
		if u <= t {
			if !contains(tried, nd) {
				return nd, 0
			}
			if free == nil {
				free = nd
			}
			continue
		}
		if soonest == nil || u < soonest.until.Load() {
			soonest = nd
		}
	}
	if free != nil {
		return free, 0
	}
	return soonest, time.Duration(soonest.until.Load() - t)
}

func contains(list []*node, n *node) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

// setAddrs makes addrs the node list: known nodes are kept (with their
// connections and back-off), new ones dialled, gone ones closed.
func (c *Client) setAddrs(addrs []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	want := map[string]bool{}
	var list []*node
	for _, a := range addrs {
		if want[a] {
			continue
		}
		want[a] = true
		nd := c.byAddr[a]
		if nd == nil {
			conn, err := c.dial(a)
			if err != nil {
				return err
			}
			nd = &node{addr: a, conn: conn}
			c.byAddr[a] = nd
		}
		list = append(list, nd)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].addr < list[j].addr })
	c.nodes.Store(&list)
	for a, nd := range c.byAddr {
		if !want[a] {
			delete(c.byAddr, a)
			closeConn(nd.conn)
		}
	}
	return nil
}

func (c *Client) dial(addr string) (Conn, error) {
	if c.cfg.Dial != nil {
		return c.cfg.Dial(addr)
	}
	return idgenservice.NewClient("idgen", kclient.WithHostPorts(addr),
		kclient.WithRPCTimeout(c.cfg.RPCTimeout), kclient.WithConnectTimeout(c.cfg.ConnectTimeout),
		kclient.WithTransportProtocol(transport.TTHeaderFramed),
		kclient.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: c.cfg.MaxIdleConns,
			MaxIdleGlobal: c.cfg.MaxIdleConns, MaxIdleTimeout: time.Minute}))
}

func (c *Client) closeNodes() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, nd := range c.byAddr {
		delete(c.byAddr, a)
		closeConn(nd.conn)
	}
	c.nodes.Store(&[]*node{})
}

func closeConn(conn Conn) {
	if cl, ok := conn.(interface{ Close() error }); ok {
		_ = cl.Close()
	}
}
