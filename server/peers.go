package server

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/worker"
)

// peerClock returns what the worker lease calls at start to compare this
// node's clock with the median of the peers': it asks a peer's Clock RPC
// for its wall clock (Unix ms). token is this node's client token ("" for
// none): the nodes of a cluster share it, and a peer with one refuses a
// Clock call without it, which would leave the clock check with no answer.
func peerClock(token string) worker.PeerClockFunc {
	return func(ctx context.Context, host string, port int) (int64, error) {
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		c, err := idgensvc.NewClient("idgen", client.WithHostPorts(addr), client.WithConnectTimeout(300*time.Millisecond))
		if err != nil {
			return 0, err
		}
		timeout := time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		req := &idl.ClockRequest{}
		if token != "" {
			req.Token = &token
		}
		resp, err := c.Clock(ctx, req, callopt.WithRPCTimeout(timeout))
		if err != nil {
			return 0, err
		}
		return resp.NowMs, nil
	}
}
