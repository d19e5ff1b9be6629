package issuer

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/logevery"
	"github.com/idgen/idgen/segment"
)

// ErrChannelNotServed: the request named a channel its business does not
// serve (segment.Biz.Serves). It wraps ErrInvalid, so callers see
// INVALID_ARGUMENT: the request is wrong whoever sends it (no credential
// would make it right), and it must not be retried unchanged. Only an
// admin can change what a business serves, and for an obfuscated or code
// business not at all once it has issued.
var ErrChannelNotServed = fmt.Errorf("%w: channel not served", ErrInvalid)

// channelRefusedLogEvery is the most frequent log line about refused
// channels: callers can provoke them at will.
const channelRefusedLogEvery = 10 * time.Second

// channelGate refuses requests on channels a business does not serve:
// the one check of issue 30, item 7, made in Next before anything is
// allocated.
type channelGate struct {
	refused *prometheus.CounterVec
	logs    *logevery.Limiter
}

func newChannelGate(now func() time.Time) channelGate {
	return channelGate{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_channel_refused_total",
			Help: "Requests refused because their business does not serve the channel they named (a caller not yet moved after 'idctl biz update --channels', or one probing). Business labels beyond the cap are _other."},
			[]string{"biz", "channel"}),
		logs: logevery.New(channelRefusedLogEvery, now),
	}
}

// checkChannel returns nil when biz serves ch, else an error wrapping
// ErrChannelNotServed that says what the caller and the admin can do. The
// refusal is counted and logged (at most one line per
// channelRefusedLogEvery).
func (is *Issuer) checkChannel(biz segment.Biz, ch segment.Channel) error {
	if biz.Serves(ch) {
		return nil
	}
	if is.cfg.NoSegments != nil && ch <= segment.ChannelSlowOrdered && ch != segment.ChannelSnowflake {
		// No business of this deployment can serve a segment channel:
		// say why (the fix is --mysql), not that this one does not.
		return is.noSegments(segment.ChannelName(ch))
	}
	is.chans.refused.WithLabelValues(is.labels.Label(biz.Name), segment.ChannelName(ch)).Inc()
	served := segment.ChannelNames(biz.Channels)
	var err error
	if biz.PlainOutput() {
		err = fmt.Errorf("%w: business %q serves %s, not channel %s: leave channel unset (its default, %s) or name one it serves; an admin can add the channel with 'idctl biz update --biz %s --channels %s,%s'",
			ErrChannelNotServed, biz.Name, served, is.channelName(ch), biz.Channel, biz.Name, served, segment.ChannelName(segment.CanonicalChannel(ch)))
	} else {
		err = fmt.Errorf("%w: business %q serves %s, not channel %s: its obfuscated or code values would repeat across channels; leave channel unset (its default, %s), or use another business for channel %s",
			ErrChannelNotServed, biz.Name, served, is.channelName(ch), biz.Channel, is.channelName(ch))
	}
	if ok, skipped := is.chans.logs.Allow("channel_refused"); ok {
		is.log.Info("request refused: channel not served by its business", zap.String("biz", biz.Name),
			zap.String("channel", segment.ChannelName(ch)), zap.String("serves", served),
			zap.Int("not_logged_since_last", skipped), zap.Duration("log_window", is.chans.logs.Window()))
	}
	return err
}

// checkChannelList checks the channels an admin lists for a business:
// each must have a strategy on this node (a typo would otherwise only
// show as refused requests), and without a shared counter store the
// segment channels are refused as a default channel is.
func (is *Issuer) checkChannelList(chs []segment.Channel) error {
	for _, ch := range chs {
		if !is.ext.Has(ch) {
			return fmt.Errorf("%w: channels: no strategy serves channel %d on this node: want %s", ErrInvalid, ch, is.channelChoices())
		}
		if ch <= segment.ChannelSlowOrdered {
			if err := is.checkChannels(ch, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// autoChannels is the channel and channel list of a business created on
// first use by a request on ch (nil: none named): the request's channel
// becomes the default. SNOWFLAKE and UNORDERED come together (their
// numbers never meet: the segment stays below the snowflake floor), as
// the quick start asks for both of one business; ORDERED alone; a custom
// strategy's channel beside a SNOWFLAKE default.
func autoChannels(ch *segment.Channel) (segment.Channel, []segment.Channel) {
	c := segment.ChannelSnowflake
	if ch != nil {
		c = *ch
	}
	switch c {
	case segment.ChannelOrdered, segment.ChannelSlowOrdered:
		return segment.ChannelOrdered, []segment.Channel{segment.ChannelOrdered}
	case segment.ChannelUnordered, segment.ChannelSnowflake:
		return c, []segment.Channel{segment.ChannelUnordered, segment.ChannelSnowflake}
	}
	return segment.ChannelSnowflake, []segment.Channel{segment.ChannelSnowflake, c}
}
