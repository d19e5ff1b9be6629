// Package forward is an ORDERED request's way to the owner of its sub
// key's shard: a node that does not own the shard sends the caller's whole
// NextIDs request there, marked no_forward, and relays the owner's answer
// unchanged (issue 30: one policy path, applied by the node that answers).
// The server decides when to forward (it knows the allocator and the
// owner map); this package does the hop and says how to read its answer.
package forward

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"

	"github.com/idgen/idgen/internal/kitextls"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/segment"
)

// Routed reports whether req is answered by the owner of its sub key's
// shard: it names a sub key and channel ORDERED, SLOW_ORDERED or none (a
// sub key is only accepted on the ORDERED channels, so with no channel it
// is an ORDERED request or a mistake the owner refuses as this node
// would), and was not forwarded here already.
func Routed(req *idl.NextIDsRequest) bool {
	if req.GetSubKey() == "" || req.GetNoForward() {
		return false
	}
	return req.Channel == nil || *req.Channel == idl.Channel_ORDERED || *req.Channel == idl.Channel_SLOW_ORDERED
}

// Transition reports an owner's refusal that passes within milliseconds
// (it no longer owns the shard, or is taking it over): worth another look
// at the owner map.
func Transition(err error) bool {
	var ie *idl.IdgenError
	return errors.As(err, &ie) && ie.Code == idl.ErrorCode_SEGMENT_UNAVAILABLE && ie.Retryable &&
		ie.RetryAfterMs > 0 && ie.RetryAfterMs <= 100
}

// Forwarder keeps one Kitex client per owner address. It is safe for
// concurrent use.
type Forwarder struct {
	mu      sync.Mutex
	clients map[string]idgensvc.Client
	tls     *tls.Config // nil: plain TCP
	timeout time.Duration
}

// New returns a Forwarder whose calls take at most timeout (less when the
// caller's context ends sooner). With tc set it forwards over TLS (Kitex's
// Go net transport and internal/kitextls's dialer), else over plain TCP.
func New(tc *tls.Config, timeout time.Duration) *Forwarder {
	return &Forwarder{clients: map[string]idgensvc.Client{}, tls: tc, timeout: timeout}
}

func (f *Forwarder) client(addr string) (idgensvc.Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[addr]; ok {
		return c, nil
	}
	opts := []client.Option{client.WithHostPorts(addr), client.WithConnectTimeout(300 * time.Millisecond)}
	if f.tls != nil {
		opts = append(opts, client.WithDialer(kitextls.Dialer(f.tls)))
	}
	c, err := idgensvc.NewClient("idgen", opts...)
	if err != nil {
		return nil, err
	}
	f.clients[addr] = c
	return c, nil
}

// NextIDs asks the owner at addr for req (count numbers, as this node
// read the request). The owner's refusal comes back as it answered it,
// the message prefixed with its address; a transport failure or a
// malformed answer is a retryable SEGMENT_UNAVAILABLE.
func (f *Forwarder) NextIDs(ctx context.Context, addr string, req *idl.NextIDsRequest, count int) (*idl.NextIDsResponse, error) {
	unavailable := func(why string) error {
		return &idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE, Retryable: true, RetryAfterMs: 200,
			Message: fmt.Sprintf("ordered shard %d: forwarding to the owner %s: %s: retry, or send the request to the owner (the Go client does)",
				segment.Shard(req.GetSubKey()), addr, why)}
	}
	c, err := f.client(addr)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	fwd := *req
	yes := true
	fwd.NoForward = &yes
	timeout := f.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	resp, err := c.NextIDs(ctx, &fwd, callopt.WithRPCTimeout(max(timeout, time.Millisecond)))
	var ie *idl.IdgenError
	switch {
	case errors.As(err, &ie):
		out := *ie
		out.Message = "owner " + addr + ": " + ie.Message
		return nil, &out
	case err != nil:
		return nil, unavailable(err.Error())
	case resp == nil || resp.Count != int64(count) || !wellFormed(resp, count):
		return nil, unavailable(fmt.Sprintf("the owner answered a malformed response for %d numbers", count))
	}
	return resp, nil
}

// wellFormed checks that resp carries count numbers in exactly one form:
// ranges of positive numbers, IDs or codes.
func wellFormed(resp *idl.NextIDsResponse, count int) bool {
	switch {
	case len(resp.Ids) > 0:
		return len(resp.Ids) == count && len(resp.Ranges) == 0 && len(resp.Codes) == 0
	case len(resp.Codes) > 0:
		return len(resp.Codes) == count && len(resp.Ranges) == 0
	}
	var n int64
	for _, r := range resp.Ranges {
		if r == nil || r.First < 1 || r.Last < r.First {
			return false
		}
		n += r.Last - r.First + 1
	}
	return n == int64(count)
}
