package issuer

import (
	"context"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/snowflake"
)

// CreateBiz creates a business.
func (is *Issuer) CreateBiz(ctx context.Context, b segment.Biz) (segment.Biz, error) {
	if err := segment.ValidateBizName(b.Name); err != nil {
		return segment.Biz{}, err
	}
	out, err := is.cfg.Store.CreateBiz(ctx, b)
	is.cfg.Bizs.Invalidate(b.Name)
	return out, err
}

// UpdateBiz changes the set fields of a business.
func (is *Issuer) UpdateBiz(ctx context.Context, name string, u segment.BizUpdate) (segment.Biz, error) {
	out, err := is.cfg.Store.UpdateBiz(ctx, name, u)
	is.cfg.Bizs.Invalidate(name)
	return out, err
}

// GetBiz reads a business from the store (not the cache).
func (is *Issuer) GetBiz(ctx context.Context, name string) (segment.Biz, error) {
	return is.cfg.Store.GetBiz(ctx, name)
}

// ListBiz lists every business.
func (is *Issuer) ListBiz(ctx context.Context) ([]segment.Biz, error) {
	return is.cfg.Store.ListBiz(ctx)
}

// Parse decodes a snowflake ID. belowFloor is true when id is below the
// cluster's snowflake floor: then it is not a snowflake ID of this cluster
// but a segment (UNORDERED or fallback) ID, and the parts mean nothing.
func (is *Issuer) Parse(id int64) (p snowflake.Parts, belowFloor bool, err error) {
	p, err = is.cfg.Layout.Parse(id)
	return p, err == nil && id < is.cfg.Floor, err
}
