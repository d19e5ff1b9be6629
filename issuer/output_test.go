package issuer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/worker"
)

func boolp(v bool) *bool { return &v }

// TestOutputsDecodeAcrossChannels: every output of an obfuscated or coded
// business decodes back to a distinct underlying number, on each channel.
func TestOutputsDecodeAcrossChannels(t *testing.T) {
	f := newIssuer(t, nil)
	f.is.Acquired(worker.Slot{Node: 1, Worker: 1, HighWater: t0.UnixMilli() + 60_000})
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		obf    bool
		format segment.Format
	}{{"obf-int", true, segment.FormatInt}, {"obf-code", true, segment.FormatCode}, {"plain-code", false, segment.FormatCode}} {
		// One business per channel: a business whose output is not plain
		// serves one channel (its values would repeat across channels).
		for _, ch := range []segment.Channel{segment.ChannelUnordered, segment.ChannelOrdered, segment.ChannelSnowflake, ChannelSlowOrdered} {
			def := ch
			if isOrdered(ch) {
				def = segment.ChannelOrdered
			}
			b, err := f.is.CreateBiz(ctx, segment.Biz{Name: fmt.Sprintf("%s-%d", tc.name, ch), Channel: def, Obfuscate: tc.obf,
				Format: tc.format, CodeMinLength: 6})
			if err != nil {
				t.Fatal(err)
			}
			req := Request{Biz: b.Name, Channel: chp(ch), Count: 50}
			if isOrdered(ch) {
				req.SubKey = "k"
			}
			resp, err := f.is.Next(ctx, req)
			if err != nil {
				t.Fatalf("%s/%s: %v", tc.name, ch, err)
			}
			if resp.Ranges != nil || resp.Count() != 50 {
				t.Fatalf("%s/%s: ranges %v, count %d", tc.name, ch, resp.Ranges, resp.Count())
			}
			var values []string
			for _, id := range resp.IDs {
				values = append(values, strconv.FormatInt(id, 10))
			}
			for _, c := range resp.Codes {
				if len(c) < 6 {
					t.Fatalf("%s: code %q shorter than code_min_length 6", tc.name, c)
				}
				values = append(values, c)
			}
			seen := map[int64]bool{}
			for _, v := range values {
				d, err := f.is.Decode(ctx, b.Name, v)
				if err != nil {
					t.Fatalf("%s/%s: Decode(%s): %v", tc.name, ch, v, err)
				}
				if d.Number < 1 || seen[d.Number] {
					t.Fatalf("%s/%s: %s decodes to %d, seen before or not positive", tc.name, ch, v, d.Number)
				}
				seen[d.Number] = true
			}
		}
	}
	if _, err := f.is.Decode(ctx, "obf-code-0", "UUUUUU"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Decode of a non-code: %v", err)
	}
}

// TestOutputLockedAfterIssuing: obfuscate, format and code_min_length
// change freely before the first number and are refused after it, for an
// obfuscating business and for a plain one.
func TestOutputLockedAfterIssuing(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	for _, obf := range []bool{true, false} {
		name := fmt.Sprintf("lock-%v", obf)
		if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: name, Channel: segment.ChannelUnordered, Obfuscate: obf}); err != nil {
			t.Fatal(err)
		}
		code := segment.FormatCode
		if _, err := f.is.UpdateBiz(ctx, name, segment.BizUpdate{Format: &code}); err != nil {
			t.Fatalf("format change before issuing: %v", err)
		}
		if _, err := f.is.Next(ctx, Request{Biz: name, Count: 3}); err != nil {
			t.Fatal(err)
		}
		_, err := f.is.UpdateBiz(ctx, name, segment.BizUpdate{Obfuscate: boolp(!obf)})
		if !errors.Is(err, segment.ErrOutputLocked) {
			t.Fatalf("obfuscate switch after issuing: %v, want ErrOutputLocked", err)
		}
		t.Logf("refusal: %v", err)
		intf := segment.FormatInt
		if _, err := f.is.UpdateBiz(ctx, name, segment.BizUpdate{Format: &intf}); !errors.Is(err, segment.ErrOutputLocked) {
			t.Fatalf("format switch after issuing: %v, want ErrOutputLocked", err)
		}
		resp, err := f.is.Next(ctx, Request{Biz: name, Count: 1})
		if err != nil || len(resp.Codes) != 1 {
			t.Fatalf("after the refused switch: %+v, %v", resp, err)
		}
	}
}

// TestPlainOnlyRefusesBeforeIssuing: a request that can carry only a range
// (the OrderedTake hop of older nodes) is refused for a business whose
// output is obfuscated IDs or codes, before any number is allocated or the
// business is marked issued; a plain business is served.
func TestPlainOnlyRefusesBeforeIssuing(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		obf    bool
		format segment.Format
	}{{"po-obf", true, segment.FormatInt}, {"po-code", false, segment.FormatCode}} {
		if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: tc.name, Channel: segment.ChannelOrdered, Obfuscate: tc.obf, Format: tc.format}); err != nil {
			t.Fatal(err)
		}
		_, err := f.is.Next(ctx, Request{Biz: tc.name, Count: 5, SubKey: "k", PlainOnly: true})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "send NextIDs") {
			t.Fatalf("%s: PlainOnly: %v, want ErrInvalid saying to send NextIDs", tc.name, err)
		}
		b, err := f.is.GetBiz(ctx, tc.name)
		if err != nil || b.Issued {
			t.Fatalf("%s: after the refusal: issued %v, %v (want nothing issued)", tc.name, b.Issued, err)
		}
		// The refusal allocated nothing: the first answer is start_num.
		resp, err := f.is.Next(ctx, Request{Biz: tc.name, Count: 1, SubKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := f.is.Decode(ctx, tc.name, firstValue(resp))
		if err != nil || d.Number != 1 {
			t.Fatalf("%s: first number after the refusal: %d, %v; want 1", tc.name, d.Number, err)
		}
	}
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "po-plain", Channel: segment.ChannelOrdered}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.is.Next(ctx, Request{Biz: "po-plain", Count: 5, SubKey: "k", PlainOnly: true})
	if err != nil || len(resp.Ranges) != 1 || resp.Ranges[0] != (segment.Range{First: 1, Last: 5}) {
		t.Fatalf("plain business, PlainOnly: %+v, %v; want 1..5", resp, err)
	}
}

// firstValue is the first output of resp as a caller would pass it to Decode.
func firstValue(resp Response) string {
	switch {
	case len(resp.Codes) > 0:
		return resp.Codes[0]
	case len(resp.IDs) > 0:
		return strconv.FormatInt(resp.IDs[0], 10)
	case len(resp.Ranges) > 0:
		return strconv.FormatInt(resp.Ranges[0].First, 10)
	}
	return ""
}

func benchNext(b *testing.B, biz segment.Biz, count int) {
	f := newIssuer(b, nil)
	ctx := context.Background()
	biz.Channel, biz.Step = segment.ChannelUnordered, 1_000_000
	if _, err := f.is.CreateBiz(ctx, biz); err != nil {
		b.Fatal(err)
	}
	req := Request{Biz: biz.Name, Count: count}
	for b.Loop() {
		if _, err := f.is.Next(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextPlain / Obfuscated / Code: the in-process issuer on the
// UNORDERED channel, one ID per call and batches of 100.
func BenchmarkNextPlain(b *testing.B) { benchNext(b, segment.Biz{Name: "plain"}, 1) }
func BenchmarkNextObfuscated(b *testing.B) {
	benchNext(b, segment.Biz{Name: "obf", Obfuscate: true}, 1)
}
func BenchmarkNextCode(b *testing.B) {
	benchNext(b, segment.Biz{Name: "code", Obfuscate: true, Format: segment.FormatCode, CodeMinLength: 6}, 1)
}
func BenchmarkNextPlain100(b *testing.B) { benchNext(b, segment.Biz{Name: "plain"}, 100) }
func BenchmarkNextObfuscated100(b *testing.B) {
	benchNext(b, segment.Biz{Name: "obf", Obfuscate: true}, 100)
}
