package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

func (s *suite) testCreateAndGet(t *testing.T, st segment.Store) {
	in := segment.Biz{
		Name: s.name("get"), Channel: segment.ChannelOrdered, Step: 500, LowWaterPct: 30,
		StartNum: 1000, Fallback: true, RateLimit: 250, Description: "orders, 订单",
	}
	before := time.Now().Add(-time.Minute)
	created := create(t, st, in)
	got, err := st.GetBiz(ctx(t), in.Name)
	if err != nil {
		t.Fatalf("GetBiz: %v", err)
	}
	for _, b := range []segment.Biz{created, got} {
		if b.Name != in.Name || b.Channel != in.Channel || b.Step != in.Step || b.LowWaterPct != in.LowWaterPct ||
			b.StartNum != in.StartNum || b.Fallback != in.Fallback || b.RateLimit != in.RateLimit || b.Description != in.Description {
			t.Errorf("biz %+v, want the settings of %+v", b, in)
		}
		if b.CreatedAt.Before(before) || b.UpdatedAt.Before(b.CreatedAt) {
			t.Errorf("timestamps created %v updated %v, want now-ish and updated >= created", b.CreatedAt, b.UpdatedAt)
		}
		if b.CreatedAt.Location() != time.UTC || b.UpdatedAt.Location() != time.UTC {
			t.Errorf("timestamps %v / %v are not UTC", b.CreatedAt, b.UpdatedAt)
		}
	}
}

func (s *suite) testCreateDefaults(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("defaults")})
	if b.Step != segment.DefaultStep || b.LowWaterPct != segment.DefaultLowWaterPct ||
		b.StartNum != segment.DefaultStartNum || b.Channel != segment.ChannelUnordered {
		t.Errorf("defaults: got %+v", b)
	}
	got, err := st.GetBiz(ctx(t), b.Name)
	if err != nil || got.Step != segment.DefaultStep || got.StartNum != segment.DefaultStartNum {
		t.Errorf("GetBiz after create with defaults: %+v, %v", got, err)
	}
}

func (s *suite) testCreateExists(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("dup")})
	_, err := st.CreateBiz(ctx(t), segment.Biz{Name: b.Name, Step: 7})
	wantErr(t, "second CreateBiz", err, segment.ErrBizExists, "")
	got, err := st.GetBiz(ctx(t), b.Name)
	if err != nil || got.Step != segment.DefaultStep {
		t.Errorf("the failed create changed the biz: %+v, %v", got, err)
	}
}

func (s *suite) testCreateInvalid(t *testing.T, st segment.Store) {
	ok := s.name("ok")
	tests := []struct {
		name  string
		biz   segment.Biz
		field string
	}{
		{"empty name", segment.Biz{}, "name"},
		{"name starts with dash", segment.Biz{Name: "-x"}, "name"},
		{"name with space", segment.Biz{Name: "a b"}, "name"},
		{"name with slash", segment.Biz{Name: "a/b"}, "name"},
		{"name not ascii", segment.Biz{Name: "订单"}, "name"},
		{"name too long", segment.Biz{Name: strings.Repeat("a", 129)}, "name"},
		{"negative step", segment.Biz{Name: ok, Step: -1}, "step"},
		{"step too large", segment.Biz{Name: ok, Step: segment.MaxStep + 1}, "step"},
		{"low water negative", segment.Biz{Name: ok, LowWaterPct: -1}, "low_water_pct"},
		{"low water above 90", segment.Biz{Name: ok, LowWaterPct: 91}, "low_water_pct"},
		{"start num negative", segment.Biz{Name: ok, StartNum: -5}, "start_num"},
		{"channel too large", segment.Biz{Name: ok, Channel: 3}, "channel"},
		{"channel negative", segment.Biz{Name: ok, Channel: -1}, "channel"},
		{"rate limit negative", segment.Biz{Name: ok, RateLimit: -1}, "rate_limit"},
		{"description too long", segment.Biz{Name: ok, Description: strings.Repeat("d", segment.MaxDescriptionLen+1)}, "description"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.CreateBiz(ctx(t), tc.biz)
			wantErr(t, "CreateBiz", err, segment.ErrInvalid, tc.field)
		})
	}
	if _, err := st.GetBiz(ctx(t), ok); err == nil {
		t.Errorf("an invalid CreateBiz left biz %q behind", ok)
	}
	// The edges of the valid ranges are accepted.
	long := s.name("long")
	edge := []segment.Biz{
		{Name: long + strings.Repeat("b", segment.MaxBizNameLen-len(long)), Step: 1, LowWaterPct: 1},
		{Name: s.name("x.y:z-w"), Step: segment.MaxStep, LowWaterPct: 90, Channel: segment.ChannelSnowflake},
	}
	for _, b := range edge {
		create(t, st, b)
	}
}

func (s *suite) testUpdate(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("upd"), Step: 10, StartNum: 5, Description: "old"})
	u := segment.BizUpdate{
		Channel: ptr(segment.ChannelSnowflake), Step: ptr(int64(20)), LowWaterPct: ptr(50),
		Fallback: ptr(true), RateLimit: ptr(9), Description: ptr("new"),
	}
	got, err := st.UpdateBiz(ctx(t), b.Name, u)
	if err != nil {
		t.Fatalf("UpdateBiz: %v", err)
	}
	want := b
	want.Channel, want.Step, want.LowWaterPct, want.Fallback, want.RateLimit, want.Description =
		segment.ChannelSnowflake, 20, 50, true, 9, "new"
	for _, g := range []segment.Biz{got, mustGet(t, st, b.Name)} {
		if g.Channel != want.Channel || g.Step != want.Step || g.LowWaterPct != want.LowWaterPct ||
			g.Fallback != want.Fallback || g.RateLimit != want.RateLimit || g.Description != want.Description ||
			g.StartNum != 5 {
			t.Errorf("after update: %+v, want %+v", g, want)
		}
		if g.UpdatedAt.Before(b.UpdatedAt) || !g.CreatedAt.Equal(b.CreatedAt) {
			t.Errorf("after update: created %v updated %v, was created %v updated %v", g.CreatedAt, g.UpdatedAt, b.CreatedAt, b.UpdatedAt)
		}
	}
	// An empty update keeps everything.
	got, err = st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{})
	if err != nil || got.Step != 20 || got.Description != "new" {
		t.Errorf("empty update: %+v, %v", got, err)
	}
}

func (s *suite) testUpdateInvalid(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("updbad"), Step: 10})
	tests := []struct {
		name  string
		u     segment.BizUpdate
		field string
	}{
		{"step zero", segment.BizUpdate{Step: ptr(int64(0))}, "step"},
		{"step too large", segment.BizUpdate{Step: ptr(int64(segment.MaxStep + 1))}, "step"},
		{"low water zero", segment.BizUpdate{LowWaterPct: ptr(0)}, "low_water_pct"},
		{"low water 91", segment.BizUpdate{LowWaterPct: ptr(91)}, "low_water_pct"},
		{"channel 3", segment.BizUpdate{Channel: ptr(segment.Channel(3))}, "channel"},
		{"rate limit negative", segment.BizUpdate{RateLimit: ptr(-1)}, "rate_limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.UpdateBiz(ctx(t), b.Name, tc.u)
			wantErr(t, "UpdateBiz", err, segment.ErrInvalid, tc.field)
		})
	}
	if got := mustGet(t, st, b.Name); got.Step != 10 || got.LowWaterPct != segment.DefaultLowWaterPct {
		t.Errorf("invalid updates changed the biz: %+v", got)
	}
}

func (s *suite) testUnknownBiz(t *testing.T, st segment.Store) {
	name := s.name("missing")
	_, err := st.GetBiz(ctx(t), name)
	wantErr(t, "GetBiz", err, segment.ErrUnknownBiz, "")
	_, err = st.UpdateBiz(ctx(t), name, segment.BizUpdate{Step: ptr(int64(5))})
	wantErr(t, "UpdateBiz", err, segment.ErrUnknownBiz, "")
	_, err = st.ReserveSegment(ctx(t), name, 10)
	wantErr(t, "ReserveSegment", err, segment.ErrUnknownBiz, "")
	_, err = st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: name, SubKey: "k", Count: 1})
	wantErr(t, "ReserveOrdered", err, segment.ErrUnknownBiz, "")
	_, err = st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: name, SubKey: "k", Count: 1, RequestID: "r1"})
	wantErr(t, "ReserveOrdered with request id", err, segment.ErrUnknownBiz, "")
}

func (s *suite) testList(t *testing.T, st segment.Store) {
	names := []string{s.name("list_c"), s.name("list_a"), s.name("list_b")}
	for _, n := range names {
		create(t, st, segment.Biz{Name: n, Description: n})
	}
	all, err := st.ListBiz(ctx(t))
	if err != nil {
		t.Fatalf("ListBiz: %v", err)
	}
	var seen []string
	for i, b := range all {
		if i > 0 && all[i-1].Name >= b.Name {
			t.Errorf("ListBiz not sorted by name: %q before %q", all[i-1].Name, b.Name)
		}
		for _, n := range names {
			if b.Name == n {
				seen = append(seen, n)
				if b.Description != n {
					t.Errorf("listed %q with description %q", b.Name, b.Description)
				}
			}
		}
	}
	if len(seen) != len(names) {
		t.Errorf("ListBiz returned %v of %v", seen, names)
	}
}

// testChannels: the channels a business serves round-trip (sorted,
// SLOW_ORDERED as ORDERED, custom strategies' numbers kept, the default
// always among them) through create, update, get and list; an obfuscated
// business with overlapping channels is refused and leaves nothing
// behind; once it has issued, a move to another number space is refused
// and changes nothing.
func (s *suite) testChannels(t *testing.T, st segment.Store) {
	U, O, S := segment.ChannelUnordered, segment.ChannelOrdered, segment.ChannelSnowflake
	plain := create(t, st, segment.Biz{Name: s.name("chans"), Channel: S, Channels: []segment.Channel{segment.ChannelSlowOrdered, U, 16}})
	wantChannels(t, "created", plain, U, O, S, 16)
	wantChannels(t, "read back", mustGet(t, st, plain.Name), U, O, S, 16)
	got, err := st.UpdateBiz(ctx(t), plain.Name, segment.BizUpdate{Channels: &[]segment.Channel{O}})
	if err != nil {
		t.Fatal(err)
	}
	wantChannels(t, "after --channels ordered", got, O, S)
	wantChannels(t, "read back", mustGet(t, st, plain.Name), O, S)
	got, err = st.UpdateBiz(ctx(t), plain.Name, segment.BizUpdate{Channel: ptr(U)})
	if err != nil {
		t.Fatal(err)
	}
	wantChannels(t, "after --channel unordered", got, U, O, S)
	all, err := st.ListBiz(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(b segment.Biz) bool { return b.Name == plain.Name })
	if i < 0 {
		t.Fatalf("ListBiz does not list %q", plain.Name)
	}
	wantChannels(t, "listed", all[i], U, O, S)

	obf := s.name("chans_obf")
	_, err = st.CreateBiz(ctx(t), segment.Biz{Name: obf, Channel: U, Channels: []segment.Channel{O}, Obfuscate: true})
	wantErr(t, "obfuscated business on unordered and ordered", err, segment.ErrInvalid, "channel")
	if _, err := st.GetBiz(ctx(t), obf); err == nil {
		t.Fatalf("the refused CreateBiz left %q behind", obf)
	}
	create(t, st, segment.Biz{Name: obf, Channel: U, Obfuscate: true})
	if _, err := st.UpdateBiz(ctx(t), obf, segment.BizUpdate{Issued: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	_, err = st.UpdateBiz(ctx(t), obf, segment.BizUpdate{Channel: ptr(O)})
	wantErr(t, "issued obfuscated business moved to ordered", err, segment.ErrOutputLocked, "")
	wantChannels(t, "after the refused move", mustGet(t, st, obf), U)
	got, err = st.UpdateBiz(ctx(t), obf, segment.BizUpdate{Channels: &[]segment.Channel{S}})
	if err != nil {
		t.Fatalf("issued obfuscated business adding snowflake (disjoint from unordered): %v", err)
	}
	wantChannels(t, "unordered and snowflake", got, U, S)
}

func wantChannels(t *testing.T, what string, b segment.Biz, want ...segment.Channel) {
	t.Helper()
	if !slices.Equal(b.Channels, want) {
		t.Errorf("%s: biz %q serves %v, want %v", what, b.Name, b.Channels, want)
	}
}

func mustGet(t *testing.T, st segment.Store, name string) segment.Biz {
	t.Helper()
	b, err := st.GetBiz(ctx(t), name)
	if err != nil {
		t.Fatalf("GetBiz(%q): %v", name, err)
	}
	return b
}
