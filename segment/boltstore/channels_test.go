package boltstore

import (
	"slices"
	"testing"

	"github.com/idgen/idgen/segment"
)

// TestDecodeBizWithoutChannels: a record written before channel lists
// existed reads as segment.StoredChannels says: every built-in channel
// for a plain business, its own channel for an obfuscated or code one.
func TestDecodeBizWithoutChannels(t *testing.T) {
	for _, tc := range []struct {
		record string
		want   []segment.Channel
	}{
		{`{"name":"plain","channel":2,"step":1000,"low_water_pct":20,"start_num":1}`,
			[]segment.Channel{segment.ChannelUnordered, segment.ChannelOrdered, segment.ChannelSnowflake}},
		{`{"name":"obf","channel":0,"step":1000,"low_water_pct":20,"start_num":1,"obfuscate":true}`,
			[]segment.Channel{segment.ChannelUnordered}},
		{`{"name":"code","channel":1,"step":1000,"low_water_pct":20,"start_num":1,"format":1}`,
			[]segment.Channel{segment.ChannelOrdered}},
		{`{"name":"listed","channel":2,"step":1000,"low_water_pct":20,"start_num":1,"channels":[2,16]}`,
			[]segment.Channel{segment.ChannelSnowflake, 16}},
	} {
		b, err := decodeBiz([]byte(tc.record))
		if err != nil || !slices.Equal(b.Channels, tc.want) {
			t.Errorf("decodeBiz(%s): channels %v, %v; want %v", tc.record, b.Channels, err, tc.want)
		}
	}
}
