// Command dateorder embeds idgen with a custom strategy: date-prefixed
// order numbers, yyyyMMdd followed by a six-digit, zero-padded sequence
// number of that day (20261122000001, 20261122000002, ...).
//
// main embeds the whole idgen server (package server) and registers the
// strategy on channel 16 through server.Options.Register; every flag of
// idgen works (`go run ./examples/dateorder --data-dir /tmp/d`), and the
// built-in channels keep working beside it. The day's
// sequence comes from the ORDERED processor with the date as sub key, so
// it is unique and strictly increasing per day across every node that
// shares the store, and a day that runs past 999999 is refused, never
// wrapped.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/ordered/perrequest"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/server"
)

// Channel is the channel value the example serves.
const Channel segment.Channel = 16

// seqDigits is the width of the day's sequence number.
const seqDigits = 1_000_000

// Strategy issues date-prefixed order numbers. The day's sequence comes
// from Ordered, or, when that is nil, from the ORDERED strategy of
// Registry (the server's own, registered after Options.Register ran).
type Strategy struct {
	Ordered  *perrequest.Processor
	Registry *ext.Registry
	Now      func() time.Time // nil: time.Now
	Loc      *time.Location   // nil: UTC
}

// take reserves n numbers of the day's sequence.
func (s *Strategy) take(ctx context.Context, biz segment.Biz, subKey string, n int) (segment.Range, error) {
	if s.Ordered != nil {
		return s.Ordered.Take(ctx, biz, subKey, int64(n), segment.RequestID{})
	}
	ordered, ok := s.Registry.Strategy(segment.ChannelOrdered)
	if !ok {
		return segment.Range{}, fmt.Errorf("dateorder: no ORDERED strategy registered")
	}
	res, err := ordered.Generate(ctx, ext.Request{Biz: biz, Channel: segment.ChannelOrdered, Count: n, SubKey: subKey})
	if err != nil {
		return segment.Range{}, err
	}
	if len(res.Ranges) != 1 {
		return segment.Range{}, fmt.Errorf("dateorder: ORDERED answered %d ranges, want 1", len(res.Ranges))
	}
	return res.Ranges[0], nil
}

// Name implements ext.Strategy.
func (*Strategy) Name() string { return "dateorder" }

// Generate implements ext.Strategy.
func (s *Strategy) Generate(ctx context.Context, req ext.Request) (ext.Result, error) {
	now, loc := time.Now, time.UTC
	if s.Now != nil {
		now = s.Now
	}
	if s.Loc != nil {
		loc = s.Loc
	}
	day := now().In(loc).Format("20060102")
	r, err := s.take(ctx, req.Biz, "day:"+day, req.Count)
	if err != nil {
		return ext.Result{}, err
	}
	if r.Last >= seqDigits {
		return ext.Result{}, fmt.Errorf("%w: business %q has used the %d order numbers of %s", segment.ErrExhausted, req.Biz.Name, seqDigits-1, day)
	}
	var prefix int64
	if _, err := fmt.Sscan(day, &prefix); err != nil {
		return ext.Result{}, err
	}
	base := prefix * seqDigits
	return ext.Result{Ranges: []segment.Range{{First: base + r.First, Last: base + r.Last}}, Channel: Channel}, nil
}

// New builds an issuer over store with the date-order strategy on Channel.
func New(store segment.Store, now func() time.Time) (*issuer.Issuer, func(), error) {
	unordered, err := segment.NewUnordered(segment.UnorderedConfig{Store: store})
	if err != nil {
		return nil, nil, err
	}
	ordered, err := perrequest.New(perrequest.Config{Store: store})
	if err != nil {
		_ = unordered.Close()
		return nil, nil, err
	}
	reg := ext.NewRegistry()
	if err := reg.RegisterStrategy(Channel, &Strategy{Ordered: ordered, Now: now}); err != nil {
		_ = unordered.Close()
		return nil, nil, err
	}
	is, err := issuer.New(issuer.Config{Store: store, Unordered: unordered, Ordered: ordered,
		Bizs: segment.NewBizCache(store, 2*time.Second), Extensions: reg})
	if err != nil {
		_ = unordered.Close()
		return nil, nil, err
	}
	return is, func() { _ = unordered.Close() }, nil
}

func main() {
	server.Main(server.Options{Register: func(r *ext.Registry) error {
		return r.RegisterStrategy(Channel, &Strategy{Registry: r})
	}})
}
