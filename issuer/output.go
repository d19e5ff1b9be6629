package issuer

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/idgen/idgen/issuer/obfuscate"
	"github.com/idgen/idgen/segment"
)

// output is how a business's numbers leave the issuer, fixed from its first
// issuance on (the store refuses to change it once Issued is set).
type output struct {
	plain  bool
	format segment.Format
	minLen int
	cipher *obfuscate.Cipher // nil: not obfuscated
}

func newOutput(b segment.Biz) (*output, error) {
	o := &output{plain: b.PlainOutput(), format: b.Format, minLen: b.CodeMinLength}
	if b.Obfuscate {
		c, err := obfuscate.New(b.Key)
		if err != nil {
			return nil, fmt.Errorf("biz %q: %w", b.Name, err)
		}
		o.cipher = c
	}
	return o, nil
}

// outputOf returns the business's locked output, marking it Issued in the
// store first when it has not issued yet. The settings used are the ones
// the store returned with the mark, so an update that raced with the first
// issuance either happened before it (and is used) or is refused.
func (is *Issuer) outputOf(ctx context.Context, b segment.Biz) (*output, error) {
	if v, ok := is.outputs.Load(b.Name); ok {
		return v.(*output), nil
	}
	if !b.Issued {
		yes := true
		marked, err := is.cfg.Store.UpdateBiz(ctx, b.Name, segment.BizUpdate{Issued: &yes})
		if err != nil {
			return nil, fmt.Errorf("mark business %q as issued before its first number: %w", b.Name, err)
		}
		is.cfg.Bizs.Invalidate(b.Name)
		b = marked
	}
	o, err := newOutput(b)
	if err != nil {
		return nil, err
	}
	v, _ := is.outputs.LoadOrStore(b.Name, o)
	return v.(*output), nil
}

// apply fills resp.IDs or resp.Codes from resp.Ranges for a business whose
// output is not a plain range, and clears the ranges.
func (o *output) apply(resp *Response) {
	if o.plain {
		return
	}
	n := resp.Count()
	if o.format == segment.FormatCode {
		resp.Codes = make([]string, 0, n)
		buf := make([]byte, 0, obfuscate.MaxCodeLen)
		for _, r := range resp.Ranges {
			for v := r.First; v <= r.Last; v++ {
				buf = o.cipher.AppendCode(buf[:0], v, o.minLen)
				resp.Codes = append(resp.Codes, string(buf))
			}
		}
	} else {
		resp.IDs = make([]int64, 0, n)
		for _, r := range resp.Ranges {
			for v := r.First; v <= r.Last; v++ {
				resp.IDs = append(resp.IDs, o.cipher.EncodeID(v))
			}
		}
	}
	resp.Ranges = nil
}

// Decoded is what Decode found behind a business's output.
type Decoded struct {
	Number     int64
	Format     segment.Format
	Obfuscated bool
}

// Decode returns the number behind value, an output of business name: a
// code, or an ID in decimal (obfuscated or not).
func (is *Issuer) Decode(ctx context.Context, name, value string) (Decoded, error) {
	if err := segment.ValidateBizName(name); err != nil {
		return Decoded{}, err
	}
	b, err := is.cfg.Store.GetBiz(ctx, name)
	if err != nil {
		return Decoded{}, err
	}
	o, err := newOutput(b)
	if err != nil {
		return Decoded{}, err
	}
	d := Decoded{Format: b.Format, Obfuscated: b.Obfuscate}
	value = strings.TrimSpace(value)
	if b.Format == segment.FormatCode {
		d.Number, err = o.cipher.DecodeCode(value, o.minLen)
		if err != nil {
			return Decoded{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return d, nil
	}
	v, err := strconv.ParseInt(value, 10, 64)
	if err != nil || v < 1 {
		return Decoded{}, fmt.Errorf("%w: %q is not a positive 64-bit ID (business %q hands out integers)", ErrInvalid, value, name)
	}
	d.Number = v
	if o.cipher != nil {
		if d.Number, err = o.cipher.DecodeID(v); err != nil {
			return Decoded{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	return d, nil
}
