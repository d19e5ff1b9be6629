package server

import (
	"context"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
)

// peerAddrCodec keeps the RPC peer's address the socket's address.
//
// Kitex's TTHeader decoder (pkg/remote/codec/header_codec.go,
// fillBasicInfoOfTTHeader) copies the header's "rip" string key over the
// caller's address in rpcinfo: it exists so a proxy can forward the
// original client's address, but this server has no trusted proxy in
// front of it, so any client could name any address. That address is what
// the admin RPCs' loopback rule (no admin token configured) and the audit
// plugin's caller field read: a spoofed "rip: 127.0.0.1:1" would pass the
// loopback check and put someone else's address into the audit trail.
//
// Decode remembers rpcinfo.From().Address() (set from the connection by
// Kitex before decoding) and puts it back after the inner codec ran,
// whatever the header said and whether or not decoding failed. It works
// the same on the netpoll and the gonet (TLS) transports: both decode
// through the server codec.
//
// The wrapper implements only remote.Codec, not remote.MetaDecoder, so
// Kitex's server handler calls Decode (DecodeMeta then DecodePayload of the
// default codec) rather than the two stages separately; the only thing
// lost is profiler tagging between the stages, which this server does not
// use.
type peerAddrCodec struct {
	inner remote.Codec
}

// newPeerAddrCodec wraps the server codec; see peerAddrCodec.
func newPeerAddrCodec(inner remote.Codec) remote.Codec { return peerAddrCodec{inner: inner} }

func (c peerAddrCodec) Encode(ctx context.Context, msg remote.Message, out remote.ByteBuffer) error {
	return c.inner.Encode(ctx, msg, out)
}

func (c peerAddrCodec) Decode(ctx context.Context, msg remote.Message, in remote.ByteBuffer) error {
	ri := msg.RPCInfo()
	if ri == nil || ri.From() == nil || msg.RPCRole() != remote.Server {
		return c.inner.Decode(ctx, msg, in)
	}
	from := ri.From()
	sock := from.Address()
	err := c.inner.Decode(ctx, msg, in)
	if mi := rpcinfo.AsMutableEndpointInfo(from); mi != nil {
		_ = mi.SetAddress(sock)
	}
	return err
}

func (c peerAddrCodec) Name() string { return c.inner.Name() }
