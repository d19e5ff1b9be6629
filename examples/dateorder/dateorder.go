// Command dateorder embeds idgen with a custom strategy: date-prefixed
// order numbers, yyyyMMdd followed by a six-digit, zero-padded sequence
// number of that day (20261122000001, 20261122000002, ...).
//
// The strategy is registered on channel 16 in an ext.Registry handed to
// the issuer; the built-in channels keep working beside it. The day's
// sequence comes from the ORDERED processor with the date as sub key, so
// it is unique and strictly increasing per day across every node that
// shares the store, and a day that runs past 999999 is refused, never
// wrapped.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/boltstore"
)

// Channel is the channel value the example serves.
const Channel segment.Channel = 16

// seqDigits is the width of the day's sequence number.
const seqDigits = 1_000_000

// Strategy issues date-prefixed order numbers.
type Strategy struct {
	Ordered *segment.Ordered
	Now     func() time.Time // nil: time.Now
	Loc     *time.Location   // nil: UTC
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
	r, err := s.Ordered.Take(ctx, req.Biz, "day:"+day, int64(req.Count), "")
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
	ordered, err := segment.NewOrdered(segment.OrderedConfig{Store: store})
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
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dateorder:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "dateorder")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	is, done, err := New(store, nil)
	if err != nil {
		return err
	}
	defer done()
	ctx := context.Background()
	if _, err := is.CreateBiz(ctx, segment.Biz{Name: "order", Channel: segment.ChannelUnordered}); err != nil {
		return err
	}
	ch := Channel
	resp, err := is.Next(ctx, issuer.Request{Biz: "order", Channel: &ch, Count: 3})
	if err != nil {
		return err
	}
	for _, r := range resp.Ranges {
		for n := r.First; n <= r.Last; n++ {
			fmt.Println(n)
		}
	}
	return nil
}
