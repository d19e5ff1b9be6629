package issuer

import (
	"context"
	"fmt"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/snowflake"
)

// CreateBiz creates a business. Beyond the store's own checks it keeps the
// business's numbers below the snowflake floor (its UNORDERED segments also
// serve snowflake fallback, and IDs at or above the floor are snowflake's)
// and, without a shared counter store, refuses the segment channels.
func (is *Issuer) CreateBiz(ctx context.Context, b segment.Biz) (segment.Biz, error) {
	if err := segment.ValidateBizName(b.Name); err != nil {
		return segment.Biz{}, err
	}
	if err := is.checkChannels(b.Channel, b.Fallback); err != nil {
		return segment.Biz{}, err
	}
	if err := is.ext.CheckPlugins(b.Plugins); err != nil {
		return segment.Biz{}, err
	}
	start, step := b.StartNum, b.Step
	if start == 0 {
		start = segment.DefaultStartNum
	}
	if step == 0 {
		step = segment.DefaultStep
	}
	if err := is.checkBelowFloor(start, step); err != nil {
		return segment.Biz{}, err
	}
	out, err := is.cfg.Store.CreateBiz(ctx, b)
	is.cfg.Bizs.Invalidate(b.Name)
	return out, err
}

// UpdateBiz changes the set fields of a business.
func (is *Issuer) UpdateBiz(ctx context.Context, name string, u segment.BizUpdate) (segment.Biz, error) {
	if u.Channel != nil || (u.Fallback != nil && *u.Fallback) {
		ch, fb := segment.ChannelSnowflake, false
		if u.Channel != nil {
			ch = *u.Channel
		}
		if u.Fallback != nil {
			fb = *u.Fallback
		}
		if err := is.checkChannels(ch, fb); err != nil {
			return segment.Biz{}, err
		}
	}
	if u.Plugins != nil {
		if err := is.ext.CheckPlugins(*u.Plugins); err != nil {
			return segment.Biz{}, err
		}
	}
	if u.Step != nil {
		if err := is.checkBelowFloor(segment.DefaultStartNum, *u.Step); err != nil {
			return segment.Biz{}, err
		}
	}
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

// checkChannels refuses segment channels and fallback where there is no
// shared counter store.
func (is *Issuer) checkChannels(ch segment.Channel, fallback bool) error {
	if is.cfg.NoSegments == nil {
		return nil
	}
	if ch != segment.ChannelSnowflake {
		return fmt.Errorf("%w: channel %s needs a shared counter store: %v", ErrInvalid, ch, is.cfg.NoSegments)
	}
	if fallback {
		return fmt.Errorf("%w: fallback needs a shared counter store: %v", ErrInvalid, is.cfg.NoSegments)
	}
	return nil
}

// checkBelowFloor keeps a business's first segment below the snowflake
// floor: start_num and start_num+step-1 must both be below it.
func (is *Issuer) checkBelowFloor(start, step int64) error {
	floor := is.cfg.Floor
	if floor <= 0 {
		return nil
	}
	if start >= floor {
		return fmt.Errorf("%w: start_num %d is at or above the snowflake floor %d: segment and fallback numbers must stay below it, where no snowflake ID of this cluster can be", ErrInvalid, start, floor)
	}
	if step > floor-start {
		return fmt.Errorf("%w: step %d from start_num %d would reach the snowflake floor %d: use a step of at most %d", ErrInvalid, step, start, floor, floor-start)
	}
	return nil
}
