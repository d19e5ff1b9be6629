package issuer

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/segment"
)

// ChannelSlowOrdered is segment.ChannelSlowOrdered, the older Java
// service's name for its MySQL strict channel, served by the ORDERED
// strategy.
const ChannelSlowOrdered = segment.ChannelSlowOrdered

// isOrdered reports whether ch is served by the ORDERED strategy.
func isOrdered(ch segment.Channel) bool {
	return ch == segment.ChannelOrdered || ch == ChannelSlowOrdered
}

// channelName names a channel in messages as the IDL does: the built-ins
// by their enum names, the SLOW_ORDERED alias too (segment.Channel.String
// knows only 0..2 and calls 3 "unknown"), custom ones by value and strategy.
func (is *Issuer) channelName(ch segment.Channel) string {
	switch ch {
	case segment.ChannelUnordered:
		return "0 (UNORDERED)"
	case segment.ChannelOrdered:
		return "1 (ORDERED)"
	case segment.ChannelSnowflake:
		return "2 (SNOWFLAKE)"
	case ChannelSlowOrdered:
		return "3 (SLOW_ORDERED)"
	}
	if s, ok := is.ext.Strategy(ch); ok {
		return fmt.Sprintf("%d (custom strategy %s)", ch, s.Name())
	}
	return fmt.Sprintf("%d", ch)
}

// channelChoices lists the channels a request may name.
func (is *Issuer) channelChoices() string {
	names := make([]string, 0, 8)
	for _, ch := range is.ext.Channels() {
		names = append(names, is.channelName(ch))
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// registerBuiltins adds the built-in strategies to r.
func (is *Issuer) registerBuiltins(r *ext.Registry) error {
	for _, b := range []struct {
		ch segment.Channel
		s  ext.Strategy
	}{
		{segment.ChannelUnordered, unorderedStrategy{is}},
		{segment.ChannelOrdered, orderedStrategy{is}},
		{segment.ChannelSnowflake, snowflakeStrategy{is}},
		{ChannelSlowOrdered, orderedStrategy{is}},
	} {
		if err := r.RegisterStrategy(b.ch, b.s); err != nil {
			return fmt.Errorf("issuer: built-in strategy %s: %w (channels 0..3 are the built-ins')", b.s.Name(), err)
		}
	}
	return nil
}

type unorderedStrategy struct{ is *Issuer }

func (unorderedStrategy) Name() string { return "unordered" }

func (s unorderedStrategy) Generate(ctx context.Context, req ext.Request) (ext.Result, error) {
	if s.is.cfg.NoSegments != nil {
		return ext.Result{}, s.is.noSegments(segment.ChannelUnordered.String())
	}
	rs, err := s.is.cfg.Unordered.Take(ctx, req.Biz, int64(req.Count))
	return ext.Result{Ranges: rs, Channel: segment.ChannelUnordered}, err
}

type orderedStrategy struct{ is *Issuer }

func (orderedStrategy) Name() string { return "ordered" }

func (s orderedStrategy) Generate(ctx context.Context, req ext.Request) (ext.Result, error) {
	if s.is.cfg.NoSegments != nil {
		return ext.Result{}, s.is.noSegments(segment.ChannelOrdered.String())
	}
	rid := segment.RequestID{ID: req.RequestID, Scope: req.RequestScope}
	r, err := s.is.cfg.Ordered.Take(ctx, req.Biz, req.SubKey, int64(req.Count), rid)
	if err != nil {
		return ext.Result{}, err
	}
	return ext.Result{Ranges: []segment.Range{r}, Channel: req.Channel}, nil
}

type snowflakeStrategy struct{ is *Issuer }

func (snowflakeStrategy) Name() string { return "snowflake" }

func (s snowflakeStrategy) Generate(_ context.Context, req ext.Request) (ext.Result, error) {
	rs, err := s.is.snowflakeRanges(req.Count)
	if err != nil {
		return ext.Result{}, err
	}
	return ext.Result{Ranges: rs, Channel: segment.ChannelSnowflake}, nil
}

// logRejection is the first handler of the chain: it counts every refusal
// and logs it (debug for the retryable snowflake refusals, which can be
// frequent during a rollback and are logged by the clock guard already).
func (is *Issuer) logRejection(_ context.Context, req ext.Request, strategy string, refusal error) (ext.Result, bool, error) {
	is.rejections.WithLabelValues(strategy).Inc()
	lvl := zap.InfoLevel
	if Refusal(refusal) {
		lvl = zap.DebugLevel
	}
	if ce := is.log.Check(lvl, "strategy refused"); ce != nil {
		ce.Write(zap.String("biz", req.Biz.Name), zap.String("strategy", strategy), zap.Error(refusal))
	}
	return ext.Result{}, false, nil
}

// snowflakeFallback serves a SNOWFLAKE refusal from the business's
// UNORDERED segment when the business allows it (the fallback space stays
// below the snowflake floor, so the two never meet).
func (is *Issuer) snowflakeFallback(ctx context.Context, req ext.Request, _ string, err error) (ext.Result, bool, error) {
	if req.Channel != segment.ChannelSnowflake || !req.Biz.Fallback || !Refusal(err) {
		return ext.Result{}, false, nil
	}
	if is.cfg.NoSegments != nil {
		return ext.Result{}, false, fmt.Errorf("%w (no fallback: %w)", err, is.noSegments("snowflake fallback"))
	}
	frs, ferr := is.cfg.Unordered.Take(ctx, req.Biz, int64(req.Count))
	if ferr != nil {
		return ext.Result{}, false, fmt.Errorf("snowflake refused (%v) and the fallback segment failed: %w", err, ferr)
	}
	return ext.Result{Ranges: frs, Channel: segment.ChannelUnordered, Fallback: true, Refusal: err}, true, nil
}
