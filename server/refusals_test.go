package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// TestRefusalRingKeepsTheLast: past its size the ring keeps the newest
// refusals, newest first, and the counts cover every refusal since start.
func TestRefusalRingKeepsTheLast(t *testing.T) {
	r := newRefusals(5)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 12 {
		code := "RATE_LIMITED"
		if i%3 == 0 {
			code = "UNKNOWN_BIZ"
		}
		r.add(t0.Add(time.Duration(i)*time.Second), "NextIDs", fmt.Sprintf("biz%d", i), code, "m")
	}
	got := r.recent()
	if len(got) != 5 {
		t.Fatalf("recent kept %d, want 5", len(got))
	}
	for i, e := range got {
		if want := fmt.Sprintf("biz%d", 11-i); e.Biz != want {
			t.Errorf("recent[%d] = %s, want %s (newest first)", i, e.Biz, want)
		}
	}
	counts, total := r.counts()
	if total != 12 {
		t.Errorf("total %d, want 12", total)
	}
	want := []codeCount{{"RATE_LIMITED", 8}, {"UNKNOWN_BIZ", 4}}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v (most frequent first)", counts, want)
	}
}

// TestRefusalRingPartial: before the ring is full, recent lists what was
// added, newest first.
func TestRefusalRingPartial(t *testing.T) {
	r := newRefusals(refusalRingSize)
	r.add(time.Now(), "GetBiz", "a", "UNAUTHENTICATED", "x")
	r.add(time.Now(), "NextIDs", "b", "INVALID_ARGUMENT", "y")
	got := r.recent()
	if len(got) != 2 || got[0].Biz != "b" || got[1].Biz != "a" {
		t.Fatalf("recent = %+v, want b then a", got)
	}
}

// TestRefusalRingClipsCallerText: a caller's business name and message
// are cut (rune-safe, valid UTF-8), so a huge or malformed request costs
// the ring no more than a short one.
func TestRefusalRingClipsCallerText(t *testing.T) {
	r := newRefusals(2)
	huge := strings.Repeat("é", 1<<20)
	r.add(time.Now(), "NextIDs", huge, "INVALID_ARGUMENT", "bad \xff\xfe byte "+huge)
	e := r.recent()[0]
	if n := utf8.RuneCountInString(e.Biz); n != refusalBizMax+1 || !strings.HasSuffix(e.Biz, "…") {
		t.Errorf("biz kept %d runes (%q...), want %d and an ellipsis", n, e.Biz[:16], refusalBizMax+1)
	}
	if !utf8.ValidString(e.Message) || utf8.RuneCountInString(e.Message) != refusalMsgMax+1 {
		t.Errorf("message %q: want valid UTF-8 of %d runes", e.Message, refusalMsgMax+1)
	}
	if !strings.HasPrefix(e.Message, "bad \uFFFD byte é") {
		t.Errorf("message %q: invalid bytes not replaced", e.Message)
	}
	for _, tc := range []struct{ in, want string }{
		{"", ""}, {"short", "short"}, {strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{strings.Repeat("a", 65), strings.Repeat("a", 64) + "…"},
		{strings.Repeat("日", 300), strings.Repeat("日", 64) + "…"},
	} {
		if got := clip(tc.in, 64); got != tc.want {
			t.Errorf("clip(%d bytes) = %q, want %q", len(tc.in), got, tc.want)
		}
	}
}

// TestRefusalCodesBounded: the per-code counts stay bounded whatever codes
// arrive; the excess is counted under OTHER.
func TestRefusalCodesBounded(t *testing.T) {
	r := newRefusals(4)
	for i := range 100 {
		r.add(time.Now(), "NextIDs", "", fmt.Sprintf("CODE_%d", i), "")
	}
	counts, total := r.counts()
	if len(counts) > refusalCodesMax+1 || total != 100 {
		t.Fatalf("%d codes counted (total %d), want at most %d and 100", len(counts), total, refusalCodesMax+1)
	}
	var sum uint64
	for _, c := range counts {
		sum += c.Count
	}
	if sum != 100 {
		t.Errorf("counts sum to %d, want 100", sum)
	}
}

// TestRefusalRingConcurrent: writers and readers at once (run with -race)
// keep the ring at its size and lose no count.
func TestRefusalRingConcurrent(t *testing.T) {
	r := newRefusals(refusalRingSize)
	const writers, each = 8, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := len(r.recent()); n > refusalRingSize {
					t.Errorf("recent returned %d, above the ring size", n)
					return
				}
				r.counts()
			}
		})
	}
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				r.add(time.Now(), "NextIDs", fmt.Sprintf("w%d", w), []string{"RATE_LIMITED", "UNKNOWN_BIZ"}[i%2], "m")
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	counts, total := r.counts()
	if total != writers*each {
		t.Errorf("total %d, want %d", total, writers*each)
	}
	for _, c := range counts {
		if c.Count != writers*each/2 {
			t.Errorf("%s counted %d, want %d", c.Code, c.Count, writers*each/2)
		}
	}
	if n := len(r.recent()); n != refusalRingSize {
		t.Errorf("ring holds %d, want %d", n, refusalRingSize)
	}
}

// TestRefusalRingNil: a nil ring (a handler without a node) records and
// reports nothing, without panicking.
func TestRefusalRingNil(t *testing.T) {
	var r *refusals
	r.add(time.Now(), "NextIDs", "b", "INTERNAL", "x")
	if got := r.recent(); got != nil {
		t.Errorf("recent = %v", got)
	}
	if c, n := r.counts(); c != nil || n != 0 {
		t.Errorf("counts = %v, %d", c, n)
	}
}
