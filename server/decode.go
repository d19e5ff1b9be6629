package server

import (
	"context"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// Decode returns the number behind a business's output (admin): for an
// obfuscated ID or a code the key is needed, so only operators may ask.
func (h *handler) Decode(ctx context.Context, req *idl.DecodeRequest) (resp *idl.DecodeResponse, err error) {
	defer h.done("Decode", "", time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request")
	}
	if err := h.admin(ctx, req.Token); err != nil {
		return nil, err
	}
	is, err := h.issuer(idl.ErrorCode_SEGMENT_UNAVAILABLE)
	if err != nil {
		return nil, err
	}
	d, err := is.Decode(ctx, req.Biz, req.Value)
	if err != nil {
		return nil, h.toIDLError(req.Biz, err)
	}
	resp = &idl.DecodeResponse{Number: d.Number, Format: d.Format.String(), Obfuscated: d.Obfuscated}
	if p, below, perr := is.Parse(d.Number); perr == nil && !below {
		resp.Snowflake = &idl.ParseIDResponse{Id: p.ID, TimestampMs: p.UnixMs, Time: p.Time.Format("2006-01-02T15:04:05.000Z07:00"),
			Idc: int32(p.IDC), Node: int32(p.Node), Worker: int32(p.Worker), Sequence: int32(p.Sequence)}
	}
	return resp, nil
}
