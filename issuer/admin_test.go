package issuer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idgen/idgen/segment"
)

// TestListBizPage: pages are in name order, strictly after the cursor, at
// most limit long, and next is "" exactly on the last page; limits out of
// range are refused.
func TestListBizPage(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	var want []string
	for i := 6; i >= 0; i-- { // created out of order
		name := fmt.Sprintf("biz-%02d", i)
		if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: name}); err != nil {
			t.Fatal(err)
		}
		want = append([]string{name}, want...)
	}
	var got []string
	after, pages := "", 0
	for {
		page, next, err := f.is.ListBizPage(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page) > 3 || pages > 3 {
			t.Fatalf("page %d: %d businesses", pages, len(page))
		}
		for _, b := range page {
			got = append(got, b.Name)
		}
		if next == "" {
			break
		}
		if next != page[len(page)-1].Name {
			t.Fatalf("next %q is not the page's last name", next)
		}
		after = next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != 3 {
		t.Fatalf("paged %v in %d pages, want %v in 3", got, pages, want)
	}
	// A page that ends exactly at the last business has no next.
	page, next, err := f.is.ListBizPage(ctx, "biz-03", 3)
	if err != nil || len(page) != 3 || next != "" {
		t.Fatalf("exact last page: %d, next %q, %v", len(page), next, err)
	}
	// The cursor need not be a business; past the end: empty.
	if page, _, _ := f.is.ListBizPage(ctx, "biz-02x", 0); len(page) != 4 || page[0].Name != "biz-03" {
		t.Fatalf("after a name that is not a business: %v", page)
	}
	if page, next, err := f.is.ListBizPage(ctx, "zzz", 0); err != nil || len(page) != 0 || next != "" {
		t.Fatalf("past the end: %v %q %v", page, next, err)
	}
	for _, limit := range []int{-1, MaxListPage + 1} {
		if _, _, err := f.is.ListBizPage(ctx, "", limit); !errors.Is(err, ErrInvalid) {
			t.Errorf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}

// TestDefaultCodeMinLength: format code with code_min_length 0 becomes
// DefaultCodeMinLength at creation and when an update switches a business
// that has not issued to codes; an explicit length is kept.
func TestDefaultCodeMinLength(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	b, err := f.is.CreateBiz(ctx, segment.Biz{Name: "c", Channel: segment.ChannelUnordered, Format: segment.FormatCode})
	if err != nil || b.CodeMinLength != DefaultCodeMinLength {
		t.Fatalf("created: code_min_length %d, %v", b.CodeMinLength, err)
	}
	resp, err := f.is.Next(ctx, Request{Biz: "c", Count: 1})
	if err != nil || len(resp.Codes[0]) != DefaultCodeMinLength {
		t.Fatalf("first code %v, %v", resp.Codes, err)
	}
	if b, _ := f.is.CreateBiz(ctx, segment.Biz{Name: "c3", Format: segment.FormatCode, CodeMinLength: 3}); b.CodeMinLength != 3 {
		t.Fatalf("explicit code_min_length 3 became %d", b.CodeMinLength)
	}
	if b, _ := f.is.CreateBiz(ctx, segment.Biz{Name: "i", Channel: segment.ChannelUnordered}); b.CodeMinLength != 0 {
		t.Fatalf("int business got code_min_length %d", b.CodeMinLength)
	}
	code := segment.FormatCode
	b, err = f.is.UpdateBiz(ctx, "i", segment.BizUpdate{Format: &code})
	if err != nil || b.CodeMinLength != DefaultCodeMinLength {
		t.Fatalf("switched to codes: code_min_length %d, %v", b.CodeMinLength, err)
	}
	four := 4
	if b, err = f.is.UpdateBiz(ctx, "i", segment.BizUpdate{CodeMinLength: &four}); err != nil || b.CodeMinLength != 4 {
		t.Fatalf("explicit 4: %d, %v", b.CodeMinLength, err)
	}
}

// TestChannelMessages: channel 3 (SLOW_ORDERED) is named as such, never as
// "unknown", in the refusal of an invalid channel and in the sub_key rules.
func TestChannelMessages(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	_, err := f.is.Next(ctx, Request{Biz: "b", Channel: chp(9), Count: 1})
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "unknown]") ||
		!strings.Contains(err.Error(), "0 (UNORDERED), 1 (ORDERED), 2 (SNOWFLAKE) or 3 (SLOW_ORDERED)") {
		t.Errorf("channel 9: %v", err)
	}
	_, err = f.is.Next(ctx, Request{Biz: "b", Channel: chp(ChannelSlowOrdered), Count: 1})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "3 (SLOW_ORDERED)") {
		t.Errorf("channel 3 without sub_key: %v", err)
	}
	if _, err := f.is.Next(ctx, Request{Biz: "b", Channel: chp(ChannelSlowOrdered), SubKey: "k", Count: 1}); err != nil {
		t.Errorf("channel 3 with sub_key: %v", err)
	}
}

// TestDecodeDoesNotEchoLongInput: a long value is quoted to 64 bytes with
// its length, whatever the business's format.
func TestDecodeDoesNotEchoLongInput(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	for _, b := range []segment.Biz{{Name: "int"}, {Name: "code", Format: segment.FormatCode, Obfuscate: true}} {
		if _, err := f.is.CreateBiz(ctx, b); err != nil {
			t.Fatal(err)
		}
		long := strings.Repeat("9", 60) + strings.Repeat("X", 10_000)
		_, err := f.is.Decode(ctx, b.Name, long)
		if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "XXXXX") || !strings.Contains(err.Error(), "… (10060 bytes)") ||
			len(err.Error()) > 300 {
			t.Errorf("%s: %v", b.Name, err)
		}
		_, err = f.is.Decode(ctx, b.Name, "not-an-id!")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not-an-id!") {
			t.Errorf("%s: short input: %v, want it quoted whole", b.Name, err)
		}
	}
}
