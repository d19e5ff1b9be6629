package segment_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

func TestValidateBizName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"order", true},
		{"im.message", true},
		{"A1_b.c:d-e", true},
		{"9", true},
		{strings.Repeat("x", 128), true},
		{"", false},
		{strings.Repeat("x", 129), false},
		{"_x", false},
		{".x", false},
		{"a b", false},
		{"a/b", false},
		{"a\x00b", false},
		{"é", false},
	}
	for _, tc := range tests {
		err := segment.ValidateBizName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateBizName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, segment.ErrInvalid) {
			t.Errorf("ValidateBizName(%q) = %v, want ErrInvalid", tc.name, err)
		}
	}
}

func TestNormalizeBiz(t *testing.T) {
	b, err := segment.NormalizeBiz(segment.Biz{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Step != segment.DefaultStep || b.LowWaterPct != segment.DefaultLowWaterPct || b.StartNum != segment.DefaultStartNum {
		t.Errorf("defaults not filled: %+v", b)
	}
}

func TestApplyBizUpdate(t *testing.T) {
	b, _ := segment.NormalizeBiz(segment.Biz{Name: "x"})
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))
	step := int64(5)
	got, err := segment.ApplyBizUpdate(b, segment.BizUpdate{Step: &step}, now)
	if err != nil || got.Step != 5 || !got.UpdatedAt.Equal(now) || got.UpdatedAt.Location() != time.UTC {
		t.Fatalf("ApplyBizUpdate: %+v, %v", got, err)
	}
	zero := int64(0)
	if _, err := segment.ApplyBizUpdate(b, segment.BizUpdate{Step: &zero}, now); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("step 0 update: %v, want ErrInvalid", err)
	}
}

// TestNormalizeOrderedRequestNoWrap: a start number so high that the first
// reservation would pass 2^63-1 is EXHAUSTED, never a wrapped negative
// number (issue 9, item 10).
func TestNormalizeOrderedRequestNoWrap(t *testing.T) {
	for _, tc := range []struct {
		start, count int64
		want         error
	}{
		{math.MaxInt64, 1, nil},
		{math.MaxInt64, 2, segment.ErrExhausted},
		{math.MaxInt64 - 99, 100, nil},
		{math.MaxInt64 - 99, 101, segment.ErrExhausted},
		{1, segment.MaxStep, nil},
	} {
		_, err := segment.NormalizeOrderedRequest(segment.OrderedRequest{Biz: "b", SubKey: "k", StartNum: tc.start, Count: tc.count})
		if !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
			t.Errorf("start %d count %d: %v; want %v", tc.start, tc.count, err, tc.want)
		}
	}
}

// TestValidateBizNameNamesUTF8Character: the refusal names the character
// as the caller wrote it (issue 11: 'é' was reported as 'Ã').
func TestValidateBizNameNamesUTF8Character(t *testing.T) {
	err := segment.ValidateBizName("commande-é")
	if err == nil || !strings.Contains(err.Error(), "'é' at byte 9") {
		t.Fatalf("got %v; want the character 'é' at byte 9 named", err)
	}
}
