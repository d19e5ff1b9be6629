package server

import (
	"fmt"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/segment"
)

// channelsFromIDL reads the channels list of CreateBiz/UpdateBiz: channel
// numbers 0..127 (the built-ins and custom strategies), at most
// segment.MaxBizChannels of them (after SLOW_ORDERED folds into ORDERED
// the store checks again).
func channelsFromIDL(list []idl.Channel) ([]segment.Channel, error) {
	if len(list) > segment.MaxBizChannels {
		return nil, invalid(fmt.Sprintf("channels: %d listed, at most %d", len(list), segment.MaxBizChannels))
	}
	out := make([]segment.Channel, 0, len(list))
	for _, ch := range list {
		if ch < 0 || ch > 127 {
			return nil, invalid(fmt.Sprintf("channels: channel %d out of range 0..127", ch))
		}
		out = append(out, segment.Channel(ch))
	}
	return out, nil
}

// channelsToIDL is the channels field of a business as sent.
func channelsToIDL(chs []segment.Channel) []idl.Channel {
	out := make([]idl.Channel, len(chs))
	for i, ch := range chs {
		out[i] = idl.Channel(ch)
	}
	return out
}

// defaultOfChannels is the default channel of a business created with a
// channel list and no channel: the first built-in listed ("--channels
// ordered" means an ORDERED business, not SNOWFLAKE plus ORDERED).
func defaultOfChannels(chs []segment.Channel) (segment.Channel, bool) {
	for _, ch := range chs {
		switch ch {
		case segment.ChannelUnordered, segment.ChannelOrdered, segment.ChannelSnowflake:
			return ch, true
		case segment.ChannelSlowOrdered:
			return segment.ChannelOrdered, true
		}
	}
	return 0, false
}
