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

// newOutput builds b's output. An obfuscating business's key is unwrapped
// first (errors wrap ErrMasterKey when this node cannot).
func (is *Issuer) newOutput(b segment.Biz) (*output, error) {
	o := &output{plain: b.PlainOutput(), format: b.Format, minLen: b.CodeMinLength}
	if b.Obfuscate {
		key, err := is.businessKey(b)
		if err != nil {
			return nil, err
		}
		c, err := obfuscate.New(key)
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
	if b.Obfuscate {
		// A node that cannot open the key refuses before marking the
		// business issued, so its refusal leaves no trace in the store.
		if _, err := is.businessKey(b); err != nil {
			return nil, err
		}
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
	o, err := is.newOutput(b)
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

// maxDecodeLen is the longest value Decode looks at: a decimal int64 has
// at most 19 digits and a code at most obfuscate.MaxCodeLen characters, so
// anything longer is refused without parsing (or echoing) it.
const maxDecodeLen = 64

// quoteTrunc quotes s for an error message, at most its first maxDecodeLen
// bytes: errors must not echo an arbitrarily long input back (into logs,
// responses and terminals).
func quoteTrunc(s string) string {
	if len(s) <= maxDecodeLen {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:maxDecodeLen], len(s))
}

// Decode returns the number behind value, an output of business name: a
// code, or an ID in decimal (obfuscated or not).
func (is *Issuer) Decode(ctx context.Context, name, value string) (Decoded, error) {
	if err := segment.ValidateBizName(name); err != nil {
		return Decoded{}, err
	}
	value = strings.TrimSpace(value)
	if len(value) > maxDecodeLen {
		return Decoded{}, fmt.Errorf("%w: %s is not an output of business %q: too long (an ID has at most 19 digits, a code at most %d characters)",
			ErrInvalid, quoteTrunc(value), name, obfuscate.MaxCodeLen)
	}
	b, err := is.cfg.Store.GetBiz(ctx, name)
	if err != nil {
		return Decoded{}, err
	}
	o, err := is.newOutput(b)
	if err != nil {
		return Decoded{}, err
	}
	d := Decoded{Format: b.Format, Obfuscated: b.Obfuscate}
	if b.Format == segment.FormatCode {
		d.Number, err = o.cipher.DecodeCode(value, o.minLen)
		if err != nil {
			return Decoded{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return d, nil
	}
	v, err := strconv.ParseInt(value, 10, 64)
	if err != nil || v < 1 {
		return Decoded{}, fmt.Errorf("%w: %s is not a positive 64-bit ID (business %q hands out integers)", ErrInvalid, quoteTrunc(value), name)
	}
	d.Number = v
	if o.cipher != nil {
		if d.Number, err = o.cipher.DecodeID(v); err != nil {
			return Decoded{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	return d, nil
}

// outputName says in a message what a business that is not plain hands out.
func outputName(b segment.Biz) string {
	if b.Format == segment.FormatCode {
		return "codes"
	}
	return "obfuscated IDs"
}
