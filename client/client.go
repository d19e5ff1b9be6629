package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/trans/gonet"
	"github.com/cloudwego/kitex/transport"
	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/internal/kitextls"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// Channel selects how IDs are made (the IDL's Channel values).
type Channel int32

// The channels. A call that names none gets the business's default channel.
const (
	Unordered   Channel = 0 // unique, trend-increasing: segments
	Ordered     Channel = 1 // strictly increasing per (biz, sub key) across the cluster
	Snowflake   Channel = 2 // time-ordered per node, decodable
	SlowOrdered Channel = 3 // the older Java service's name for Ordered: served as Ordered
)

func (ch Channel) String() string {
	switch ch {
	case Unordered:
		return "UNORDERED"
	case Ordered:
		return "ORDERED"
	case Snowflake:
		return "SNOWFLAKE"
	case SlowOrdered:
		return "SLOW_ORDERED"
	}
	return "Channel(" + strconv.Itoa(int(ch)) + ")"
}

func (ch Channel) ordered() bool { return ch == Ordered || ch == SlowOrdered }

// Range is an inclusive range of IDs: First, First+1, ..., Last.
type Range struct {
	First, Last int64
}

// Len is the number of IDs in r.
func (r Range) Len() int64 { return r.Last - r.First + 1 }

// Result is what one NextIDs answer (or the prefetch buffer) gave.
type Result struct {
	Ranges []Range
	// IDs (obfuscated integers) or Codes replace Ranges for a business
	// whose output is not a plain range (its obfuscate or format setting).
	IDs      []int64
	Codes    []string
	Channel  Channel // the channel that served
	Fallback bool    // SNOWFLAKE was refused and a segment served instead
	Addr     string  // the node that answered ("" when served from the prefetch buffer)
}

// Count is the number of IDs in r.
func (r Result) Count() int64 {
	if r.IDs != nil || r.Codes != nil {
		return int64(len(r.IDs) + len(r.Codes))
	}
	var n int64
	for _, rg := range r.Ranges {
		n += rg.Len()
	}
	return n
}

// Conn is one node's NextIDs call. The Kitex client generated in
// kitex_gen/idgen/idgenservice satisfies it.
type Conn interface {
	NextIDs(ctx context.Context, req *idl.NextIDsRequest, opts ...callopt.Option) (*idl.NextIDsResponse, error)
}

// Client asks idgen nodes for IDs. It is safe for concurrent use. Close it
// when done.
type Client struct {
	cfg   Config
	nodes atomic.Pointer[[]*node]
	rr    atomic.Uint64

	mu     sync.Mutex // guards byAddr, the node list writes, closed set
	byAddr map[string]*node

	pools map[string]*bizPools // read-only after New

	ords owners // ORDERED routing: the shard owner map (owners.go)

	bg     context.Context // cancelled by Close: refills, the ZooKeeper watch
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	zk     *zk.Conn
}

// CallOption changes one call.
type CallOption func(*callOpts)

type callOpts struct {
	channel   *Channel
	subKey    string
	requestID string
}

// WithChannel asks for ch instead of the business's default channel.
func WithChannel(ch Channel) CallOption { return func(o *callOpts) { o.channel = &ch } }

// WithRequestID sets the request_id of an ORDERED call: a retry with the
// same id gets the same range back. Without it the client generates one per
// call (kept across that call's retries).
func WithRequestID(id string) CallOption { return func(o *callOpts) { o.requestID = id } }

// WithSubKey sets the sub key (ORDERED) of a Fetch.
func WithSubKey(k string) CallOption { return func(o *callOpts) { o.subKey = k } }

// New returns a client for the nodes cfg names. With cfg.ZK it reads the
// cluster's members before returning, so the first call has nodes to ask.
func New(cfg Config) (*Client, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if !cfg.KitexLogs {
		quietKitex()
	}
	c := &Client{cfg: cfg, byAddr: map[string]*node{}}
	c.nodes.Store(&[]*node{})
	c.ords.init()
	c.bg, c.stop = context.WithCancel(context.Background())
	pools, err := c.newPools()
	if err != nil {
		c.stop()
		return nil, err
	}
	c.pools = pools
	if len(cfg.Addrs) > 0 {
		if err := c.setAddrs(cfg.Addrs); err != nil {
			c.stop()
			return nil, err
		}
		return c, nil
	}
	if err := c.startZK(); err != nil {
		c.stop()
		c.closeNodes()
		return nil, err
	}
	return c, nil
}

// Close stops the background work, drops every prefetched ID (they become
// gaps: none is ever handed out) and closes the connections. Calls after
// Close fail with ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	for _, bp := range c.pools {
		for _, p := range bp.all {
			p.close()
		}
	}
	c.ords.close()
	c.stop()
	// The connection first: a watcher blocked in a ZooKeeper call while
	// the ensemble is unreachable returns once it is closed (waiting for
	// the watcher first would hang Close until ZooKeeper came back).
	if c.zk != nil {
		c.zk.Close()
	}
	c.wg.Wait()
	c.closeNodes()
	return nil
}

// Addrs returns the nodes the client currently knows.
func (c *Client) Addrs() []string {
	list := *c.nodes.Load()
	out := make([]string, len(list))
	for i, n := range list {
		out[i] = n.addr
	}
	return out
}

// Next returns one ID of biz, from the prefetch buffer when one is
// configured for biz and the call's channel.
func (c *Client) Next(ctx context.Context, biz string, opts ...CallOption) (int64, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	if p := c.pool(biz, o); p != nil {
		return p.next(ctx)
	}
	res, err := c.fetch(ctx, biz, 1, o)
	if err != nil {
		return 0, err
	}
	switch {
	case len(res.IDs) > 0:
		return res.IDs[0], nil
	case len(res.Codes) > 0:
		return 0, fmt.Errorf("idgen: business %q hands out codes, not integers: use Fetch and Result.Codes", biz)
	}
	return res.Ranges[0].First, nil
}

// NextN returns n IDs of biz as ranges (from the prefetch buffer when one
// is configured for biz and the call's channel). n is at most the server's
// max_batch (10000 by default) without prefetch. A business answering
// obfuscated IDs gets them as ranges of one ID; one answering codes is an
// error (use Fetch and Result.Codes).
func (c *Client) NextN(ctx context.Context, biz string, n int, opts ...CallOption) ([]Range, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: n %d: ask for at least 1 ID", ErrInvalid, n)
	}
	if p := c.pool(biz, o); p != nil {
		return p.take(ctx, int64(n))
	}
	res, err := c.fetch(ctx, biz, n, o)
	if err != nil {
		return nil, err
	}
	switch {
	case len(res.Codes) > 0:
		return nil, fmt.Errorf("idgen: business %q hands out codes, not integers: use Fetch and Result.Codes", biz)
	case len(res.IDs) > 0:
		// Obfuscated IDs are not consecutive: each is a range of one (two
		// that happen to follow each other are merged).
		out := make([]Range, 0, len(res.IDs))
		for _, v := range res.IDs {
			out = appendRange(out, Range{v, v})
		}
		return out, nil
	}
	return res.Ranges, nil
}

// Ordered returns n numbers of (biz, subKey) from the ORDERED channel:
// strictly increasing across the whole cluster, as one range. The call
// carries a request_id (WithRequestID, or one generated for this call) so
// that a retry after a lost reply gets the same range: no gap, no
// duplicate. WithChannel(SlowOrdered) is accepted; other channels are not.
func (c *Client) Ordered(ctx context.Context, biz, subKey string, n int, opts ...CallOption) (Range, error) {
	o := callOpts{channel: new(Ordered)}
	for _, f := range opts {
		f(&o)
	}
	if !o.channel.ordered() {
		return Range{}, fmt.Errorf("%w: Ordered on channel %v: use Next or NextN", ErrInvalid, *o.channel)
	}
	if subKey == "" {
		return Range{}, fmt.Errorf("%w: Ordered needs a sub key", ErrInvalid)
	}
	if n < 1 {
		return Range{}, fmt.Errorf("%w: n %d: ask for at least 1 number", ErrInvalid, n)
	}
	o.subKey = subKey
	res, err := c.fetch(ctx, biz, n, o)
	if err != nil {
		return Range{}, err
	}
	if len(res.Ranges) != 1 {
		return Range{}, fmt.Errorf("idgen: ORDERED answer with %d ranges, want 1", len(res.Ranges))
	}
	return res.Ranges[0], nil
}

// Fetch asks the cluster for n IDs in one request, never from the prefetch
// buffer, and returns the whole answer: what idctl uses. With a sub key
// (WithSubKey) or an ordered channel it carries a request_id as Ordered
// does.
func (c *Client) Fetch(ctx context.Context, biz string, n int, opts ...CallOption) (Result, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	if n < 1 {
		return Result{}, fmt.Errorf("%w: n %d: ask for at least 1 ID", ErrInvalid, n)
	}
	return c.fetch(ctx, biz, n, o)
}

// fetch sends one NextIDs request with failover and retries.
func (c *Client) fetch(ctx context.Context, biz string, n int, o callOpts) (Result, error) {
	if n > maxCount {
		return Result{}, fmt.Errorf("%w: n %d is above %d", ErrInvalid, n, maxCount)
	}
	req := &idl.NextIDsRequest{Biz: biz, Count: int32(n)}
	if o.channel != nil {
		ch := idl.Channel(*o.channel)
		req.Channel = &ch
	}
	if o.subKey != "" {
		req.SubKey = &o.subKey
	}
	// ORDERED: always a request_id, so that retrying a call whose reply was
	// lost is answered with the stored range. A sub key implies ORDERED
	// (the server refuses one on other channels), even when the channel is
	// the business's default.
	if o.subKey != "" || o.channel != nil && o.channel.ordered() || o.requestID != "" {
		id := o.requestID
		if id == "" {
			id = newRequestID()
		}
		req.RequestId = &id
	}
	if c.cfg.Token != "" {
		req.Token = &c.cfg.Token
	}
	resp, addr, err := c.call(ctx, req)
	if err != nil {
		return Result{}, err
	}
	res := Result{Ranges: make([]Range, 0, len(resp.Ranges)), Channel: Channel(resp.Channel), Fallback: resp.Fallback, Addr: addr,
		IDs: resp.Ids, Codes: resp.Codes}
	got := int64(len(resp.Ids) + len(resp.Codes))
	for _, r := range resp.Ranges {
		if r == nil || r.Last < r.First {
			return Result{}, fmt.Errorf("idgen %s: malformed range %v in the answer", addr, r)
		}
		res.Ranges = append(res.Ranges, Range{r.First, r.Last})
		got += r.Last - r.First + 1
	}
	if got != int64(n) {
		return Result{}, fmt.Errorf("idgen %s: asked for %d IDs, the answer holds %d", addr, n, got)
	}
	return res, nil
}

// maxCount bounds one request's count (the wire field is an i32; the
// server's own max_batch is far lower and refuses more with
// INVALID_ARGUMENT).
const maxCount = 1 << 30

// call sends req to one node after another until one answers, an error
// is not retryable, the attempts are used up or ctx ends. A request with a
// sub key (ORDERED) goes first to its shard's owner when the owner map
// names a known node (routeOrdered), then in the normal order.
func (c *Client) call(ctx context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, string, error) {
	if c.closed.Load() {
		return nil, "", ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.CallTimeout)
		defer cancel()
	}
	var (
		tried   [8]*node
		ntried  int
		last    error
		lastAt  string
		attempt int
		ordered = req.SubKey != nil && *req.SubKey != ""
		owner   = c.routeOrdered(ctx, req) // tried first, once
	)
	for {
		var (
			nd   *node
			wait time.Duration
		)
		atOwner := attempt == 0 && owner != nil
		if atOwner {
			nd = owner
		} else {
			nd, wait = c.pick(tried[:ntried], c.cfg.Now())
		}
		if nd == nil {
			if last == nil {
				last = ErrNoNodes
			}
			wait = noNodesPause
		}
		if wait > 0 {
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				return nil, lastAt, c.giveUp(ctx, last, lastAt, attempt, "no node can be asked again before the deadline")
			}
			if err := c.cfg.Sleep(ctx, wait); err != nil {
				return nil, lastAt, c.giveUp(ctx, last, lastAt, attempt, "")
			}
			if nd == nil {
				attempt++
				if attempt >= c.cfg.MaxAttempts {
					return nil, lastAt, c.giveUp(ctx, last, lastAt, attempt, "")
				}
				continue
			}
		}
		if c.closed.Load() {
			return nil, lastAt, ErrClosed
		}
		resp, err := nd.conn.NextIDs(ctx, req)
		attempt++
		if err == nil {
			if nd.fails.Load() != 0 {
				nd.fails.Store(0)
			}
			return resp, nd.addr, nil
		}
		last, lastAt = err, nd.addr
		again, after := retryable(err)
		if ordered {
			c.ownerFailed(atOwner, again, err)
		}
		if !again {
			return nil, nd.addr, &Error{Addr: nd.addr, Attempts: attempt, Err: err}
		}
		nd.block(c.cfg.Now(), after)
		if ntried < len(tried) {
			tried[ntried] = nd
			ntried++
		}
		if ctx.Err() != nil || attempt >= c.cfg.MaxAttempts {
			return nil, lastAt, c.giveUp(ctx, last, lastAt, attempt, "")
		}
	}
}

// noNodesPause is how long a call waits for discovery when no node is
// known.
const noNodesPause = 100 * time.Millisecond

// giveUp wraps the last error of a call that ran out of time or attempts.
func (c *Client) giveUp(ctx context.Context, last error, addr string, attempts int, why string) error {
	e := &Error{Addr: addr, Attempts: attempts, Err: last}
	switch {
	case ctx.Err() != nil:
		e.Reason = ctx.Err()
	case attempts >= c.cfg.MaxAttempts:
		e.Reason = ErrRetryBudget
	default:
		e.Reason = errors.New(why)
	}
	return e
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "c-" + hex.EncodeToString(b[:])
}

// dialTLS is Config.Dial when Config.TLS is set: the Kitex client of one
// node as the default one (TTHeader framing, timeouts, pooled connections),
// on Kitex's Go net transport with a dialer that completes the TLS
// handshake within ConnectTimeout. netpoll, Kitex's default transport,
// reads the socket itself and cannot do TLS.
func (cfg *Config) dialTLS(addr string) (Conn, error) {
	return idgenservice.NewClient("idgen", kclient.WithHostPorts(addr),
		kclient.WithRPCTimeout(cfg.RPCTimeout), kclient.WithConnectTimeout(cfg.ConnectTimeout),
		kclient.WithTransportProtocol(transport.TTHeaderFramed),
		kclient.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: cfg.MaxIdleConns,
			MaxIdleGlobal: cfg.MaxIdleConns, MaxIdleTimeout: time.Minute}),
		kclient.WithTransHandlerFactory(gonet.NewCliTransHandlerFactory()),
		kclient.WithDialer(TLSDialer(cfg.TLS)))
}

// TLSDialer returns a Kitex dialer (kclient.WithDialer) that opens TLS
// connections with tc, for use with Kitex's Go net client transport
// (kclient.WithTransHandlerFactory(gonet.NewCliTransHandlerFactory())), as
// Config.TLS does. An empty tc.ServerName is the host of the address
// dialled. Exported for programs that build their own Kitex clients (idctl).
// The implementation is internal/kitextls, shared with the servers'
// ORDERED forwarding (ordered/forward).
func TLSDialer(tc *tls.Config) remote.Dialer {
	return kitextls.Dialer(tc)
}
