package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/codec"
	"github.com/cloudwego/kitex/pkg/remote/codec/perrors"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/logevery"
)

// frameLogEvery bounds the refused-request log to one line per reason per
// interval; idgen_rpc_frames_rejected_total is exact.
const frameLogEvery = 10 * time.Second

// newServerCodec is the RPC server's codec: Kitex's default codec (which
// refuses a declared frame length over max_frame_bytes), behind
// boundedCodec (every other declared length, and unframed messages), behind
// peerAddrCodec (the socket's address stays the caller's address).
func newServerCodec(maxFrame int, reg prometheus.Registerer, log *zap.Logger) (remote.Codec, error) {
	c := &boundedCodec{inner: codec.NewDefaultCodecWithSizeLimit(maxFrame), max: maxFrame, log: log,
		logs: logevery.New(frameLogEvery, nil),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_rpc_frames_rejected_total",
			Help: "RPC requests refused before decoding, by reason: frame_too_large (over max_frame_bytes), declared_length (a length or count larger than the frame holds), nesting, malformed, protocol (not Thrift binary)."},
			[]string{"reason"})}
	for _, r := range []string{rejectTooLarge, rejectDeclared, rejectNesting, rejectMalformed, rejectProtocol} {
		c.rejected.WithLabelValues(r)
	}
	if err := reg.Register(c.rejected); err != nil {
		return nil, fmt.Errorf("registering the RPC codec's metric: %w", err)
	}
	return newPeerAddrCodec(c), nil
}

// boundedCodec checks each request (checkRequest, codec_check.go) before
// the inner codec decodes it, so that nothing a client declares, before any
// token is checked, makes the node reserve more memory than the bytes it
// actually sent (at most max_frame_bytes per request). A refused request
// gets the inner codec's treatment of a decoding error: Kitex answers an
// exception when it can and closes the connection.
//
// Like peerAddrCodec it implements only remote.Codec, so Kitex calls
// Decode rather than DecodeMeta and DecodePayload separately.
type boundedCodec struct {
	inner    remote.Codec
	max      int
	log      *zap.Logger
	logs     *logevery.Limiter // keys: the reasons
	rejected *prometheus.CounterVec
}

func (c *boundedCodec) Encode(ctx context.Context, msg remote.Message, out remote.ByteBuffer) error {
	return c.inner.Encode(ctx, msg, out)
}

func (c *boundedCodec) Decode(ctx context.Context, msg remote.Message, in remote.ByteBuffer) error {
	if msg.RPCRole() == remote.Server {
		if err := checkRequest(in, c.max); err != nil {
			var fe *frameCheckErr
			if !errors.As(err, &fe) {
				// The connection failed mid-request: Kitex would have
				// met the same error.
				return perrors.NewProtocolError(err)
			}
			c.refused(msg, fe)
			return perrors.NewProtocolErrorWithType(perrors.InvalidData, "request refused before decoding: "+fe.msg)
		}
	}
	return c.inner.Decode(ctx, msg, in)
}

func (c *boundedCodec) Name() string { return c.inner.Name() }

// refused counts a refused request and logs at most one line per reason
// per frameLogEvery, with the caller's address and how many were held
// back.
func (c *boundedCodec) refused(msg remote.Message, fe *frameCheckErr) {
	c.rejected.WithLabelValues(fe.reason).Inc()
	ok, held := c.logs.Allow(fe.reason)
	if !ok {
		return
	}
	c.log.Warn("refused an RPC request before decoding it; the connection is closed",
		zap.String("reason", fe.reason), zap.String("peer", peerOf(msg.RPCInfo())), zap.String("error", fe.msg),
		zap.Int("max_frame_bytes", c.max), zap.Int("held_back", held), zap.Duration("window", frameLogEvery),
		zap.String("fix", "a client sending a malformed or oversized request (or an attack): if it is a legitimate client with large requests, raise max_frame_bytes; idgen_rpc_frames_rejected_total counts them all"))
}
