package segment_test

import (
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// TestOrderedModeParse: the names round-trip, empty is gapless, anything
// else is ErrInvalid naming the choices.
func TestOrderedModeParse(t *testing.T) {
	for _, m := range []segment.OrderedMode{segment.OrderedGapless, segment.OrderedCached} {
		got, err := segment.ParseOrderedMode(m.String())
		if err != nil || got != m || !m.Valid() {
			t.Errorf("ParseOrderedMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if got, err := segment.ParseOrderedMode(""); err != nil || got != segment.OrderedGapless {
		t.Errorf(`ParseOrderedMode("") = %v, %v, want gapless`, got, err)
	}
	_, err := segment.ParseOrderedMode("fast")
	wantInvalid(t, `ParseOrderedMode("fast")`, err, "ordered_mode", "gapless", "cached")
}

// TestOrderedModeValidation: gapless is the default; cached is kept; an
// unknown mode is refused at creation and by update; the mode may change
// after the business has issued (it is not an output setting).
func TestOrderedModeValidation(t *testing.T) {
	if b := mustNormalize(t, segment.Biz{Name: "m"}); b.OrderedMode != segment.OrderedGapless {
		t.Errorf("default ordered_mode %v, want gapless", b.OrderedMode)
	}
	b := mustNormalize(t, segment.Biz{Name: "m", OrderedMode: segment.OrderedCached})
	if b.OrderedMode != segment.OrderedCached {
		t.Fatalf("NormalizeBiz lost ordered_mode: %v", b.OrderedMode)
	}
	_, err := segment.NormalizeBiz(segment.Biz{Name: "m", OrderedMode: 7})
	wantInvalid(t, "create with ordered_mode 7", err, "ordered_mode", "gapless", "cached")

	now := time.Unix(100, 0)
	b.Issued = true
	gapless := segment.OrderedGapless
	got, err := segment.ApplyBizUpdate(b, segment.BizUpdate{OrderedMode: &gapless}, now)
	if err != nil || got.OrderedMode != segment.OrderedGapless {
		t.Fatalf("update of an issued business to gapless: %v, %v", got.OrderedMode, err)
	}
	step := int64(50)
	if got, err = segment.ApplyBizUpdate(b, segment.BizUpdate{Step: &step}, now); err != nil || got.OrderedMode != segment.OrderedCached {
		t.Errorf("an update of step changed ordered_mode: %v, %v", got.OrderedMode, err)
	}
	bad := segment.OrderedMode(-1)
	_, err = segment.ApplyBizUpdate(b, segment.BizUpdate{OrderedMode: &bad}, now)
	wantInvalid(t, "update ordered_mode -1", err, "ordered_mode", "gapless", "cached")
}
