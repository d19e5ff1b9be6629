package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/endpoint"
	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote/trans/gonet"
	"github.com/cloudwego/kitex/transport"

	idclient "github.com/idgen/idgen/client"
	"github.com/idgen/idgen/internal/idctlenv"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/segment"
)

// newClient returns a Kitex client for one idgen node (TTHeader framing, so
// the server can tell the protocol apart from plain framed/buffered
// clients). With IDGEN_TLS_CA (or another TLS variable, see tlsFlags) it
// speaks TLS on Kitex's Go net transport, as the client package does.
func newClient(ctx context.Context, addr string, timeout time.Duration) (idgensvc.Client, error) {
	if addr == "" {
		return nil, usageError{errors.New("--addr HOST:PORT is required (or IDGEN_ADDR)")}
	}
	tc, err := (*tlsFlags)(nil).config()
	if err != nil {
		return nil, err
	}
	if err := dialCheck(ctx, addr); err != nil {
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

// defaultAddr is the RPC address of a node on this host with the default
// rpc_addr.
const defaultAddr = "127.0.0.1:8888"

// addAddrFlag adds --addr, one node's RPC address (env IDGEN_ADDR,
// default 127.0.0.1:8888).
func addAddrFlag(fs *cmdFlags) *string {
	return fs.String("addr", envOr(idctlenv.Addr, defaultAddr), "a node's RPC address `HOST:PORT` (env "+idctlenv.Addr+")")
}

// dialCheck dials addr once and reports a refused connection as one line
// an operator can act on. Without it a refused dial is a transport failure
// like any other, reported in Kitex's words or, by get, retried to its
// deadline and ended with whatever the last try said ("connection has been
// closed by peer" after dozens of tries, issue 32), while a refused
// connection means nothing listens there. A node that is slow to answer is
// left to the call itself: only ECONNREFUSED is decided here.
func dialCheck(ctx context.Context, addr string) error {
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return refusedError(addr)
	}
	if err == nil {
		conn.Close()
	}
	return nil
}

// dialWait is dialCheck tried until timeout: get's contract is that a node
// restarted a moment ago (not listening yet) is waited for within --timeout
// (issue 10), so a refused dial is tried again every dialRetryPause, by
// this one dial and not by calls, and ends in the same one line.
func dialWait(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := dialCheck(ctx, addr)
		if err == nil || time.Now().Add(dialRetryPause).After(deadline) {
			if err != nil {
				err = fmt.Errorf("%w (refused for %v, --timeout)", err, timeout)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(dialRetryPause):
		}
	}
}

// dialRetryPause is the pause between two dials of a refusing address.
const dialRetryPause = 100 * time.Millisecond

// dialCheckAll is dialCheck for a list of nodes: refused when every one
// refuses (a client of several nodes serves while one is down).
func dialCheckAll(ctx context.Context, addrs []string) error {
	var first error
	for _, a := range addrs {
		err := dialCheck(ctx, a)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if len(addrs) > 1 {
		return fmt.Errorf("connection refused by every node of --addr %s: is idgen running there?", strings.Join(addrs, ","))
	}
	return first
}

// refusedError is the message of a refused connection to addr.
func refusedError(addr string) error {
	return fmt.Errorf("connection refused: is idgen running on %s? (--addr, env %s)", addr, idctlenv.Addr)
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

// channelHelp is the help of a --channel flag.
const channelHelp = "`channel`: snowflake, unordered, ordered, slow_ordered, or a number 0-127 (a custom strategy's, e.g. 16)"

// parseChannel maps a channel name or number (segment.ParseChannel; also
// slow-ordered) to the IDL enum: a custom strategy's channel (the 16 of
// examples/dateorder) is asked for by its number.
func parseChannel(s string) (idl.Channel, error) {
	ch, err := segment.ParseChannel(strings.ReplaceAll(s, "-", "_"))
	if err != nil {
		return 0, usageError{fmt.Errorf("--channel %q: want snowflake, unordered, ordered, slow_ordered or a channel number 0-127", s)}
	}
	return idl.Channel(ch), nil
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
