package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/endpoint"
	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote/trans/gonet"
	"github.com/cloudwego/kitex/transport"

	idclient "github.com/idgen/idgen/client"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// newClient returns a Kitex client for one idgen node (TTHeader framing, so
// the server can tell the protocol apart from plain framed/buffered
// clients). With IDGEN_TLS_CA (or another TLS variable, see tlsFlags) it
// speaks TLS on Kitex's Go net transport, as the client package does.
func newClient(addr string, timeout time.Duration) (idgensvc.Client, error) {
	if addr == "" {
		return nil, usageError{errors.New("--addr HOST:PORT is required (or IDGEN_ADDR)")}
	}
	tc, err := (*tlsFlags)(nil).config()
	if err != nil {
		return nil, err
	}
	quietKitex()
	opts := []client.Option{client.WithHostPorts(addr), client.WithRPCTimeout(timeout),
		client.WithConnectTimeout(time.Second), client.WithTransportProtocol(transport.TTHeaderFramed),
		client.WithMiddleware(retryRefusals(timeout))}
	if tc != nil {
		opts = append(opts, client.WithTransHandlerFactory(gonet.NewCliTransHandlerFactory()), client.WithDialer(idclient.TLSDialer(tc)))
	}
	return idgensvc.NewClient("idgen", opts...)
}

var quietOnce sync.Once

// quietKitex silences Kitex's own logging (once: the level is a global
// that servers in the same process read).
func quietKitex() { quietOnce.Do(func() { klog.SetLevel(klog.LevelFatal) }) }

// describe turns an RPC error into one line an operator can act on.
func describe(err error) error {
	var ie *idl.IdgenError
	if errors.As(err, &ie) {
		// The code is the prefix: drop a sentinel text an older server may
		// have left in front of the message ("invalid argument: ...").
		text := ie.Message
		for _, p := range []string{"invalid argument: ", strings.ToLower(strings.ReplaceAll(ie.Code.String(), "_", " ")) + ": "} {
			for strings.HasPrefix(text, p) {
				text = strings.TrimPrefix(text, p)
			}
		}
		msg := fmt.Sprintf("%s: %s", ie.Code, text)
		if ie.Retryable {
			msg += " (retryable"
			if ie.RetryAfterMs > 0 {
				msg += fmt.Sprintf(", after %dms", ie.RetryAfterMs)
			}
			msg += ")"
		}
		return errors.New(msg)
	}
	if strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "dial") {
		return fmt.Errorf("cannot reach the idgen server: %v (is it running? check --addr)", err)
	}
	return err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseChannel maps a channel name to the IDL enum.
func parseChannel(s string) (idl.Channel, error) {
	switch strings.ToLower(s) {
	case "unordered", "0":
		return idl.Channel_UNORDERED, nil
	case "ordered", "1":
		return idl.Channel_ORDERED, nil
	case "snowflake", "2":
		return idl.Channel_SNOWFLAKE, nil
	case "slow_ordered", "slow-ordered", "3":
		return idl.Channel_SLOW_ORDERED, nil
	}
	return 0, usageError{fmt.Errorf("--channel %q: want snowflake, unordered, ordered or slow_ordered", s)}
}

// retryRefusals makes every call of an idctl command retry the server's
// retryable refusals (a node starting, a shard changing hands, a clock
// step) until timeout from the call's start, as `idctl get` does through
// the client package: the decision and the pause are the client's own
// (idclient.Retryable: retry_after_ms when given). Only refusals are
// retried: a refusal means the server did nothing, so a retried admin call
// (CreateBiz, say) cannot act twice; a transport failure may have reached
// the server and is reported as it is.
func retryRefusals(timeout time.Duration) endpoint.Middleware {
	return func(next endpoint.Endpoint) endpoint.Endpoint {
		return func(ctx context.Context, req, resp any) error {
			deadline := time.Now().Add(timeout)
			if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
				deadline = dl
			}
			for {
				err := next(ctx, req, resp)
				r, ok := resp.(refusal)
				if err != nil || !ok || r.GetErr() == nil {
					return err
				}
				again, pause := idclient.Retryable(r.GetErr())
				pause = max(pause, minRetryPause)
				if !again || time.Now().Add(pause).After(deadline) {
					return nil // the refusal, as answered
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(pause):
				}
				r.SetErr(nil)
			}
		}
	}
}

// minRetryPause is the shortest pause between two tries of a refused call
// (a refusal without retry_after_ms).
const minRetryPause = 50 * time.Millisecond

// refusal is every generated result type: the server's IdgenError, if it
// refused.
type refusal interface {
	GetErr() *idl.IdgenError
	SetErr(*idl.IdgenError)
}
