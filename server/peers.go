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
)

// peerClock asks a peer's Clock() RPC for its wall clock (Unix ms). The
// worker lease calls it at start to compare this node's clock with the
// median of the peers'.
func peerClock(ctx context.Context, host string, port int) (int64, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	c, err := idgensvc.NewClient("idgen", client.WithHostPorts(addr), client.WithConnectTimeout(300*time.Millisecond))
	if err != nil {
		return 0, err
	}
	timeout := time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	resp, err := c.Clock(ctx, &idl.ClockRequest{}, callopt.WithRPCTimeout(timeout))
	if err != nil {
		return 0, err
	}
	return resp.NowMs, nil
}
