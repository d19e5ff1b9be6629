package issuer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
