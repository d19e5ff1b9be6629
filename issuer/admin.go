package issuer

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/snowflake"
)

// DefaultCodeMinLength is the code_min_length of a business created with
// format code and code_min_length 0 (and of one switched to format code
// before it issued, while its code_min_length is 0).
//
// Codes are a keyed bijection of consecutive numbers, and the shortest
// codes come from the smallest numbers: with no minimum length, a code's
// length tells roughly how many numbers the business has issued. From
// about 6 characters (30 bits) on, the length stays the same for the first
// billion numbers and says nothing about the volume. Codes are not
// secrets either way: they are not unguessable, and anyone who collects
// many of them can learn the structure of the mapping. Use them as compact
// identifiers, never as credentials or capability URLs.
const DefaultCodeMinLength = 6

// CreateBiz creates a business. Beyond the store's own checks it keeps the
// business's numbers below the snowflake floor (its UNORDERED segments also
// serve snowflake fallback, and IDs at or above the floor are snowflake's)
// and, without a shared counter store, refuses the segment channels. With
// a master key the obfuscation key is generated here and stored wrapped.
func (is *Issuer) CreateBiz(ctx context.Context, b segment.Biz) (segment.Biz, error) {
	if err := segment.ValidateBizName(b.Name); err != nil {
		return segment.Biz{}, err
	}
	if err := is.checkChannels(b.Channel, b.Fallback); err != nil {
		return segment.Biz{}, err
	}
	if err := is.checkChannelList(b.Channels); err != nil {
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
	if b.Format == segment.FormatCode && b.CodeMinLength == 0 {
		b.CodeMinLength = DefaultCodeMinLength
	}
	key, err := is.storedKey(b.Name, b.Key)
	if err != nil {
		return segment.Biz{}, err
	}
	b.Key = key
	out, err := is.cfg.Store.CreateBiz(ctx, b)
	is.cfg.Bizs.Invalidate(b.Name)
	if err == nil {
		is.noteCreated()
	}
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
	if u.Channels != nil {
		if err := is.checkChannelList(*u.Channels); err != nil {
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
	if err := is.defaultCodeMinLength(ctx, name, &u); err != nil {
		return segment.Biz{}, err
	}
	out, err := is.cfg.Store.UpdateBiz(ctx, name, u)
	is.cfg.Bizs.Invalidate(name)
	if err != nil {
		return out, err
	}
	return is.wrapIfPlain(ctx, out), nil
}

// defaultCodeMinLength sets DefaultCodeMinLength in u when the update
// leaves a business that has not issued yet with format code and
// code_min_length 0 (as CreateBiz does at creation). An issued business is
// left alone: its output is locked, and changing it would be refused.
func (is *Issuer) defaultCodeMinLength(ctx context.Context, name string, u *segment.BizUpdate) error {
	if u.Format == nil && u.CodeMinLength == nil {
		return nil
	}
	if u.Format != nil && *u.Format != segment.FormatCode || u.CodeMinLength != nil && *u.CodeMinLength != 0 {
		return nil
	}
	cur, err := is.cfg.Store.GetBiz(ctx, name)
	if err != nil {
		return err
	}
	format, minLen := cur.Format, cur.CodeMinLength
	if u.Format != nil {
		format = *u.Format
	}
	if u.CodeMinLength != nil {
		minLen = *u.CodeMinLength
	}
	if !cur.Issued && format == segment.FormatCode && minLen == 0 {
		n := DefaultCodeMinLength
		u.CodeMinLength = &n
	}
	return nil
}

// GetBiz reads a business from the store (not the cache).
func (is *Issuer) GetBiz(ctx context.Context, name string) (segment.Biz, error) {
	return is.cfg.Store.GetBiz(ctx, name)
}

// ListBiz lists every business.
func (is *Issuer) ListBiz(ctx context.Context) ([]segment.Biz, error) {
	return is.cfg.Store.ListBiz(ctx)
}

// Page sizes of ListBizPage.
const (
	DefaultListPage = 100
	MaxListPage     = 1000
)

// ListBizPage lists at most limit businesses whose names sort strictly
// after after (byte order), in name order: a caller pages with after =
// the next of the previous page, so the answer of one call stays bounded
// however many businesses there are. limit 0 means DefaultListPage; it
// must be at most MaxListPage. next is the last name of the page when more
// businesses follow, "" on the last page.
//
// The stores have no paged read yet: each call reads every business, so
// paging bounds the answer, not the store's work.
func (is *Issuer) ListBizPage(ctx context.Context, after string, limit int) (page []segment.Biz, next string, err error) {
	if limit == 0 {
		limit = DefaultListPage
	}
	if limit < 1 || limit > MaxListPage {
		return nil, "", fmt.Errorf("%w: page limit %d out of range 1..%d (0 means %d)", ErrInvalid, limit, MaxListPage, DefaultListPage)
	}
	all, err := is.cfg.Store.ListBiz(ctx)
	if err != nil {
		return nil, "", err
	}
	byName := func(a, b segment.Biz) int { return strings.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(all, byName) {
		slices.SortFunc(all, byName)
	}
	i := sort.Search(len(all), func(i int) bool { return all[i].Name > after })
	rest := all[i:]
	if len(rest) <= limit {
		return slices.Clip(rest), "", nil
	}
	page = slices.Clip(rest[:limit])
	return page, page[len(page)-1].Name, nil
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
