package segment

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestServes: a business serves the channels it lists and no other;
// SLOW_ORDERED is ORDERED; an obfuscated or code business serves only the
// number space of its default channel even when its stored list (edited
// by hand, or written by an older node) says more.
func TestServes(t *testing.T) {
	U, O, S, SO := ChannelUnordered, ChannelOrdered, ChannelSnowflake, ChannelSlowOrdered
	tests := []struct {
		name string
		b    Biz
		yes  []Channel
		no   []Channel
	}{
		{"default only", Biz{Channel: U, Channels: []Channel{U}}, []Channel{U}, []Channel{O, S, SO, 16}},
		{"no list: default only", Biz{Channel: S}, []Channel{S}, []Channel{U, O, SO}},
		{"no list, slow_ordered default: as its normalized list", Biz{Channel: SO}, []Channel{O, SO}, []Channel{U, S}},
		{"ordered serves slow_ordered", Biz{Channel: O, Channels: []Channel{O}}, []Channel{O, SO}, []Channel{U, S}},
		{"plain lists three", Biz{Channel: U, Channels: []Channel{U, O, S}}, []Channel{U, O, S, SO}, []Channel{16}},
		{"plain custom", Biz{Channel: S, Channels: []Channel{S, 16}}, []Channel{S, 16}, []Channel{U, O, 17}},
		{"obfuscated unordered+snowflake", Biz{Channel: S, Channels: []Channel{U, S}, Obfuscate: true}, []Channel{U, S}, []Channel{O, SO}},
		{"obfuscated list widened by hand", Biz{Channel: U, Channels: []Channel{U, O, S}, Obfuscate: true}, []Channel{U, S}, []Channel{O, SO}},
		{"code ordered, list widened by hand", Biz{Channel: O, Channels: []Channel{U, O, 16}, Format: FormatCode}, []Channel{O, SO}, []Channel{U, S, 16}},
	}
	for _, tc := range tests {
		for _, ch := range tc.yes {
			if !tc.b.Serves(ch) {
				t.Errorf("%s: Serves(%d) = false, want true", tc.name, ch)
			}
		}
		for _, ch := range tc.no {
			if tc.b.Serves(ch) {
				t.Errorf("%s: Serves(%d) = true, want false", tc.name, ch)
			}
		}
	}
}

// TestNormalizeBizChannels: the list is sorted, SLOW_ORDERED folds into
// ORDERED, the default is always in it; an obfuscated or code business
// with channels whose numbers overlap is refused with the fix named.
func TestNormalizeBizChannels(t *testing.T) {
	U, O, S := ChannelUnordered, ChannelOrdered, ChannelSnowflake
	ok := []struct {
		in   Biz
		want []Channel
	}{
		{Biz{Name: "a"}, []Channel{U}},
		{Biz{Name: "a", Channel: S}, []Channel{S}},
		{Biz{Name: "a", Channel: S, Channels: []Channel{ChannelSlowOrdered, O, 16}}, []Channel{O, S, 16}},
		{Biz{Name: "a", Channel: U, Channels: []Channel{S}, Obfuscate: true}, []Channel{U, S}},
		{Biz{Name: "a", Channel: O, Channels: []Channel{ChannelSlowOrdered}, Format: FormatCode}, []Channel{O}},
		{Biz{Name: "a", Channel: U, Channels: []Channel{U, O, S}}, []Channel{U, O, S}},
	}
	for _, tc := range ok {
		got, err := NormalizeBiz(tc.in)
		if err != nil || !slices.Equal(got.Channels, tc.want) {
			t.Errorf("NormalizeBiz(channel %d, channels %v) = %v, %v; want %v", tc.in.Channel, tc.in.Channels, got.Channels, err, tc.want)
		}
	}
	bad := []Biz{
		{Name: "a", Channel: U, Channels: []Channel{O}, Obfuscate: true},
		{Name: "a", Channel: O, Channels: []Channel{S}, Format: FormatCode},
		{Name: "a", Channel: S, Channels: []Channel{16}, Obfuscate: true},
		{Name: "a", Channel: U, Channels: []Channel{-1}},
		{Name: "a", Channel: U, Channels: []Channel{1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}},
	}
	for _, b := range bad {
		_, err := NormalizeBiz(b)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "channel") {
			t.Errorf("NormalizeBiz(channel %d, channels %v, obfuscate %v, format %v) = %v, want ErrInvalid naming channels",
				b.Channel, b.Channels, b.Obfuscate, b.Format, err)
		}
		if b.Obfuscate && !strings.Contains(err.Error(), "--channels") {
			t.Errorf("refusal %q does not name the fix (--channels)", err)
		}
	}
}

// TestApplyBizUpdateChannels: a new default replaces the old one in a
// one-channel list and joins a longer list; a new list always holds the
// default; once an obfuscated or code business has issued, its channels
// may move only within its number space (UNORDERED and SNOWFLAKE).
func TestApplyBizUpdateChannels(t *testing.T) {
	U, O, S := ChannelUnordered, ChannelOrdered, ChannelSnowflake
	now := time.Unix(1, 0)
	base := func(ch Channel, chs []Channel, obf, issued bool) Biz {
		b, err := NormalizeBiz(Biz{Name: "a", Channel: ch, Channels: chs, Obfuscate: obf})
		if err != nil {
			t.Fatal(err)
		}
		b.Issued = issued
		return b
	}
	tests := []struct {
		name    string
		b       Biz
		u       BizUpdate
		want    []Channel
		wantErr error
	}{
		{"move the only channel", base(U, nil, false, true), BizUpdate{Channel: ptr(O)}, []Channel{O}, nil},
		{"join a longer list", base(U, []Channel{S}, false, true), BizUpdate{Channel: ptr(O)}, []Channel{U, O, S}, nil},
		{"new list gets the default", base(U, nil, false, true), BizUpdate{Channels: &[]Channel{O}}, []Channel{U, O}, nil},
		{"list and default", base(U, nil, false, true), BizUpdate{Channel: ptr(S), Channels: &[]Channel{S}}, []Channel{S}, nil},
		{"legacy plain list kept", Biz{Name: "a", Channel: S, Step: 1, LowWaterPct: 1, StartNum: 1}, BizUpdate{Step: ptr(int64(2))}, []Channel{U, O, S}, nil},
		{"obfuscated before issuing moves anywhere", base(U, nil, true, false), BizUpdate{Channel: ptr(O)}, []Channel{O}, nil},
		{"obfuscated issued: unordered to snowflake", base(U, nil, true, true), BizUpdate{Channel: ptr(S)}, []Channel{S}, nil},
		{"obfuscated issued: add snowflake", base(U, nil, true, true), BizUpdate{Channels: &[]Channel{S}}, []Channel{U, S}, nil},
		{"obfuscated issued: unordered to ordered", base(U, nil, true, true), BizUpdate{Channel: ptr(O)}, nil, ErrOutputLocked},
		{"obfuscated issued: ordered to snowflake", base(O, nil, true, true), BizUpdate{Channel: ptr(S)}, nil, ErrOutputLocked},
		{"obfuscated: add ordered", base(U, nil, true, false), BizUpdate{Channels: &[]Channel{O}}, nil, ErrInvalid},
		{"obfuscated: ordered joins unordered+snowflake", base(S, []Channel{U}, true, false), BizUpdate{Channel: ptr(O)}, nil, ErrInvalid},
		{"legacy plain becomes obfuscated", Biz{Name: "a", Channel: S, Step: 1, LowWaterPct: 1, StartNum: 1, Key: NewSecretKey()},
			BizUpdate{Obfuscate: ptr(true)}, nil, ErrInvalid},
	}
	for _, tc := range tests {
		got, err := ApplyBizUpdate(tc.b, tc.u, now)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Channels, tc.want) {
			t.Errorf("%s: channels %v, %v; want %v", tc.name, got.Channels, err, tc.want)
		}
	}
}

// TestStoredChannels: a business stored before channel lists existed
// keeps every built-in channel when plain (its callers keep working) and
// serves its own channel only when obfuscated or coded.
func TestStoredChannels(t *testing.T) {
	U, O, S := ChannelUnordered, ChannelOrdered, ChannelSnowflake
	if got := StoredChannels(nil, Biz{Channel: S}); !slices.Equal(got, []Channel{U, O, S}) {
		t.Errorf("legacy plain: %v", got)
	}
	if got := StoredChannels(nil, Biz{Channel: U, Obfuscate: true}); !slices.Equal(got, []Channel{U}) {
		t.Errorf("legacy obfuscated: %v", got)
	}
	if got := StoredChannels(nil, Biz{Channel: O, Format: FormatCode}); !slices.Equal(got, []Channel{O}) {
		t.Errorf("legacy code: %v", got)
	}
	if got := StoredChannels([]Channel{S}, Biz{Channel: S}); !slices.Equal(got, []Channel{S}) {
		t.Errorf("stored list: %v", got)
	}
	if got := StoredChannels([]Channel{S, ChannelSlowOrdered, S}, Biz{Channel: U}); !slices.Equal(got, []Channel{U, O, S}) {
		t.Errorf("stored list edited by hand (no default, repeats, slow_ordered): %v, want it normalized", got)
	}
}

func TestParseChannels(t *testing.T) {
	got, err := ParseChannels("unordered, SNOWFLAKE,slow_ordered,16")
	if err != nil || !slices.Equal(got, []Channel{ChannelUnordered, ChannelSnowflake, ChannelSlowOrdered, 16}) {
		t.Errorf("ParseChannels: %v, %v", got, err)
	}
	for _, bad := range []string{"fast", "128", "-1", "unordered,x"} {
		if _, err := ParseChannels(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseChannels(%q): %v, want ErrInvalid", bad, err)
		}
	}
	if s := ChannelNames([]Channel{ChannelUnordered, ChannelSnowflake, 16}); s != "unordered,snowflake,16" {
		t.Errorf("ChannelNames: %q", s)
	}
}
func ptr[T any](v T) *T { return &v }
