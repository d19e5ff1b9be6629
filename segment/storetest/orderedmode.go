package storetest

import (
	"errors"
	"testing"

	"github.com/idgen/idgen/segment"
)

// testOrderedMode: ordered_mode round-trips through create and update
// (other updates keep it, and it may change after the business has
// issued); a business created without it is gapless; an unknown mode is
// refused naming the choices and changes nothing.
func (s *suite) testOrderedMode(t *testing.T, st segment.Store) {
	if b := create(t, st, segment.Biz{Name: s.name("mode-default")}); b.OrderedMode != segment.OrderedGapless ||
		mustGet(t, st, b.Name).OrderedMode != segment.OrderedGapless {
		t.Errorf("a business created without ordered_mode is %v, want gapless", b.OrderedMode)
	}

	in := segment.Biz{Name: s.name("mode"), Channel: segment.ChannelOrdered, OrderedMode: segment.OrderedCached}
	created := create(t, st, in)
	for what, b := range map[string]segment.Biz{"CreateBiz": created, "GetBiz": mustGet(t, st, in.Name), "ListBiz": listed(t, st, in.Name)} {
		if b.OrderedMode != segment.OrderedCached {
			t.Errorf("%s: ordered_mode %v, want cached", what, b.OrderedMode)
		}
	}
	if upd, err := st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Step: ptr(int64(33))}); err != nil || upd.OrderedMode != segment.OrderedCached {
		t.Errorf("an update of step changed ordered_mode: %v, %v", upd.OrderedMode, err)
	}
	// Not an output setting: it changes after the business has issued.
	if _, err := st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Issued: ptr(true)}); err != nil {
		t.Fatalf("UpdateBiz issued: %v", err)
	}
	upd, err := st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{OrderedMode: ptr(segment.OrderedGapless)})
	if err != nil {
		t.Fatalf("UpdateBiz ordered_mode gapless: %v", err)
	}
	for what, b := range map[string]segment.Biz{"UpdateBiz": upd, "GetBiz": mustGet(t, st, in.Name), "ListBiz": listed(t, st, in.Name)} {
		if b.OrderedMode != segment.OrderedGapless {
			t.Errorf("%s after update: ordered_mode %v, want gapless", what, b.OrderedMode)
		}
	}

	_, err = st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{OrderedMode: ptr(segment.OrderedMode(9)), Step: ptr(int64(44))})
	wantErr(t, "UpdateBiz ordered_mode 9", err, segment.ErrInvalid, "ordered_mode")
	wantErr(t, "UpdateBiz ordered_mode 9", err, segment.ErrInvalid, "gapless")
	wantErr(t, "UpdateBiz ordered_mode 9", err, segment.ErrInvalid, "cached")
	if got := mustGet(t, st, in.Name); got.OrderedMode != segment.OrderedGapless || got.Step != 33 {
		t.Errorf("a refused update changed the biz: ordered_mode %v step %d, want gapless, 33", got.OrderedMode, got.Step)
	}

	bad := s.name("mode-bad")
	_, err = st.CreateBiz(ctx(t), segment.Biz{Name: bad, OrderedMode: -1})
	wantErr(t, "CreateBiz ordered_mode -1", err, segment.ErrInvalid, "ordered_mode")
	if _, err := st.GetBiz(ctx(t), bad); !errors.Is(err, segment.ErrUnknownBiz) {
		t.Errorf("a refused CreateBiz left a business: %v", err)
	}
}
