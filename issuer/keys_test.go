package issuer

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idgen/idgen/issuer/keywrap"
	"github.com/idgen/idgen/segment"
)

func masterKey(t *testing.T, secret string) *keywrap.Key {
	t.Helper()
	k, err := keywrap.New([]byte(secret + "-0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// orderedIDs issues n IDs of biz on a fresh ORDERED sub key: numbers 1..n
// whatever else was issued, so two calls compare the output mapping.
func orderedIDs(t *testing.T, is *Issuer, biz, subKey string, n int) ([]int64, error) {
	t.Helper()
	resp, err := is.Next(context.Background(), Request{Biz: biz, Channel: chp(segment.ChannelOrdered), SubKey: subKey, Count: n})
	return resp.IDs, err
}

// TestWrapKeys: a business created before the master key is wrapped at
// start (WrapKeys) without changing its outputs; the store then holds no
// usable key; a node without the master key, or with another one, refuses
// to serve or decode it with ErrMasterKey naming the fix.
func TestWrapKeys(t *testing.T) {
	ctx := context.Background()
	plainNode := newIssuer(t, nil)
	if _, err := plainNode.is.CreateBiz(ctx, segment.Biz{Name: "obf", Channel: segment.ChannelOrdered, Obfuscate: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := plainNode.is.CreateBiz(ctx, segment.Biz{Name: "clear", Channel: segment.ChannelUnordered}); err != nil {
		t.Fatal(err)
	}
	before, err := orderedIDs(t, plainNode.is, "obf", "before", 20)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := plainNode.store.GetBiz(ctx, "obf")
	plainKey := slices.Clone(stored.Key)
	if len(plainKey) != segment.KeySize {
		t.Fatalf("key stored without a master key: %d bytes", len(plainKey))
	}

	mk := masterKey(t, "cluster")
	keyed := newIssuerOn(t, plainNode.store, plainNode.clk, func(c *Config) { c.MasterKey = mk })
	n, err := keyed.is.WrapKeys(ctx)
	if err != nil || n != 2 {
		t.Fatalf("WrapKeys: %d wrapped, %v; want 2", n, err)
	}
	if n, err := keyed.is.WrapKeys(ctx); err != nil || n != 0 {
		t.Fatalf("second WrapKeys: %d, %v; want nothing left to wrap", n, err)
	}
	stored, _ = keyed.store.GetBiz(ctx, "obf")
	if !keywrap.IsWrapped(stored.Key) || bytes.Contains(stored.Key, plainKey) {
		t.Fatalf("stored key after wrapping: %d bytes, wrapped %v", len(stored.Key), keywrap.IsWrapped(stored.Key))
	}
	after, err := orderedIDs(t, keyed.is, "obf", "after", 20)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Fatalf("outputs changed by wrapping:\n before %v\n after  %v", before, after)
	}
	d, err := keyed.is.Decode(ctx, "obf", strconv.FormatInt(before[4], 10))
	if err != nil || d.Number != 5 {
		t.Fatalf("Decode after wrapping: %+v, %v; want 5", d, err)
	}

	// A node without the master key: a fresh process (nothing cached).
	bare := newIssuerOn(t, plainNode.store, plainNode.clk, nil)
	_, err = orderedIDs(t, bare.is, "obf", "bare", 1)
	if !errors.Is(err, ErrMasterKey) || !errors.Is(err, keywrap.ErrNoMasterKey) ||
		!strings.Contains(err.Error(), `business "obf"'s key is wrapped by a master key: start the node with --master-key-file`) {
		t.Fatalf("node without the master key: %v", err)
	}
	if _, err := bare.is.Decode(ctx, "obf", strconv.FormatInt(before[0], 10)); !errors.Is(err, keywrap.ErrNoMasterKey) {
		t.Fatalf("Decode without the master key: %v", err)
	}
	if _, err := bare.is.Next(ctx, Request{Biz: "clear", Count: 1}); err != nil {
		t.Fatalf("a business that does not obfuscate needs no key: %v", err)
	}
	other := newIssuerOn(t, plainNode.store, plainNode.clk, func(c *Config) { c.MasterKey = masterKey(t, "another cluster") })
	if _, err := orderedIDs(t, other.is, "obf", "other", 1); !errors.Is(err, keywrap.ErrWrongMasterKey) || !strings.Contains(err.Error(), "wrong --master-key-file?") {
		t.Fatalf("node with another master key: %v", err)
	}
	if n, err := other.is.WrapKeys(ctx); n != 0 || !errors.Is(err, ErrMasterKey) {
		t.Fatalf("WrapKeys with another master key: %d, %v; want the keys it cannot open reported", n, err)
	}
}

// TestCreateBizWrapsKey: with a master key a new business's key is stored
// wrapped from the start, and its outputs decode.
func TestCreateBizWrapsKey(t *testing.T) {
	ctx := context.Background()
	f := newIssuer(t, func(c *Config) { c.MasterKey = masterKey(t, "cluster") })
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "code", Channel: segment.ChannelUnordered, Obfuscate: true, Format: segment.FormatCode}); err != nil {
		t.Fatal(err)
	}
	stored, _ := f.store.GetBiz(ctx, "code")
	if !keywrap.IsWrapped(stored.Key) {
		t.Fatalf("new business's key stored plain (%d bytes)", len(stored.Key))
	}
	resp, err := f.is.Next(ctx, Request{Biz: "code", Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Codes {
		if _, err := f.is.Decode(ctx, "code", c); err != nil {
			t.Fatalf("Decode(%s): %v", c, err)
		}
	}
	// Auto-created businesses too.
	if _, err := f.is.Next(ctx, Request{Biz: "auto", Channel: chp(segment.ChannelUnordered), Count: 1}); err != nil {
		t.Fatal(err)
	}
	if stored, _ := f.store.GetBiz(ctx, "auto"); !keywrap.IsWrapped(stored.Key) {
		t.Fatalf("auto-created business's key stored plain (%d bytes)", len(stored.Key))
	}
}
