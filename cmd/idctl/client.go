package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client"
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
		client.WithConnectTimeout(time.Second), client.WithTransportProtocol(transport.TTHeaderFramed)}
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
