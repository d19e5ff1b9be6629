package server

import (
	"fmt"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/server"
)

// checkKitexOptions refuses the Options.KitexOptions that would take over
// what idgen's own options set up (see Options.KitexOptions): each option
// is applied to a blank server.Options first and the fields that matter
// are looked at, so a conflict is an error at start, named, instead of a
// node that listens elsewhere, loses its connection cap, frame limit or
// peer-address rule, never shuts down, or panics inside Kitex (a second
// WithTransServerFactory). An option that cannot be applied to the blank
// options (it panics there) is let through unchecked.
func checkKitexOptions(opts []server.Option, tls bool) error {
	for i, op := range opts {
		if op.F == nil {
			return fmt.Errorf("Options.KitexOptions[%d]: an empty server.Option", i)
		}
		if what := kitexOptionConflict(op, tls); what != "" {
			return fmt.Errorf("Options.KitexOptions[%d] sets %s, which idgen's own server options own: leave it out", i, what)
		}
	}
	return nil
}

// kitexOptionConflict names what op sets that idgen owns, "" if nothing.
func kitexOptionConflict(op server.Option, tls bool) (what string) {
	o := &server.Options{
		Svr:       &rpcinfo.EndpointBasicInfo{},
		Configs:   rpcinfo.NewRPCConfig(),
		RemoteOpt: &remote.ServerOption{},
		TracerCtl: &rpcinfo.TraceController{},
	}
	defer func() {
		if recover() != nil {
			what = ""
		}
	}()
	op.F(o, &o.DebugInfo)
	r := o.RemoteOpt
	switch {
	case r.Listener != nil || r.Address != nil || o.Proxy != nil:
		return "the listener (WithListener, WithServiceAddr or WithProxy; idgen listens on rpc_addr)"
	case r.TransServerFactory != nil || r.SvrHandlerFactory != nil:
		return "the transport (WithTransServerFactory, WithTransHandlerFactory or WithMuxTransport; idgen's is netpoll, or Go net with TLS, with its connection cap)"
	case r.Codec != nil:
		return "the codec (WithCodec; idgen's enforces max_frame_bytes and records the peer's address)"
	case o.ExitSignal != nil:
		return "the exit signal (WithExitSignal; idgen's stops the server on shutdown after handing off its ORDERED shards)"
	case tls && (o.Limit.ConLimit != nil || (o.Limit.Limits != nil && o.Limit.Limits.MaxConnections > 0)):
		return "a connection limit with TLS (WithLimit MaxConnections, WithConnectionLimiter; Kitex's Go net transport never releases it, so it would lock every client out: max_connections caps connections)"
	}
	return ""
}
