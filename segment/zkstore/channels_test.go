package zkstore

import (
	"slices"
	"testing"

	"github.com/idgen/idgen/segment"
)

// TestDecodeWithoutChannels: a znode written before channel lists existed
// reads as segment.StoredChannels says; a list out of range is refused.
func TestDecodeWithoutChannels(t *testing.T) {
	for _, tc := range []struct {
		znode string
		want  []segment.Channel
	}{
		{`{"name":"plain","channel":"snowflake","step":1000,"low_water_pct":20,"start_num":1}`,
			[]segment.Channel{segment.ChannelUnordered, segment.ChannelOrdered, segment.ChannelSnowflake}},
		{`{"name":"obf","channel":"ordered","step":1000,"low_water_pct":20,"start_num":1,"obfuscate":true}`,
			[]segment.Channel{segment.ChannelOrdered}},
		{`{"name":"listed","channel":"unordered","step":1000,"low_water_pct":20,"start_num":1,"channels":[0,16]}`,
			[]segment.Channel{segment.ChannelUnordered, 16}},
	} {
		b, err := decode([]byte(tc.znode))
		if err != nil || !slices.Equal(b.Channels, tc.want) {
			t.Errorf("decode(%s): channels %v, %v; want %v", tc.znode, b.Channels, err, tc.want)
		}
	}
	if _, err := decode([]byte(`{"name":"bad","channel":"unordered","channels":[0,300]}`)); err == nil {
		t.Error("decode of channel 300: no error")
	}
}
