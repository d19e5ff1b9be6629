package storetest

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/idgen/idgen/segment"
)

// testOutputSettings: the output settings and the secret key round-trip;
// the key is generated at creation and kept by updates; once Issued is
// set, obfuscate/format/code_min_length are locked and Issued stays set.
func (s *suite) testOutputSettings(t *testing.T, st segment.Store) {
	in := segment.Biz{Name: s.name("out"), Obfuscate: true, Format: segment.FormatCode, CodeMinLength: 6,
		Plugins: []string{"audit", "stats"}}
	created := create(t, st, in)
	if len(created.Key) != segment.KeySize {
		t.Fatalf("created key is %d bytes, want %d", len(created.Key), segment.KeySize)
	}
	got := mustGet(t, st, in.Name)
	if !got.Obfuscate || got.Format != segment.FormatCode || got.CodeMinLength != 6 ||
		!slices.Equal(got.Plugins, in.Plugins) || got.Issued || !bytes.Equal(got.Key, created.Key) {
		t.Fatalf("GetBiz = %+v, want the output settings of %+v and the created key", got, in)
	}
	// A business created without output settings still gets a key.
	if plain := create(t, st, segment.Biz{Name: s.name("out-plain")}); len(plain.Key) != segment.KeySize {
		t.Fatalf("plain business key is %d bytes", len(plain.Key))
	}
	// Before issuing, the output settings can change; the key stays.
	upd, err := st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Format: ptr(segment.FormatInt), Plugins: ptr([]string{"audit"})})
	if err != nil || upd.Format != segment.FormatInt || !slices.Equal(upd.Plugins, []string{"audit"}) || !bytes.Equal(upd.Key, created.Key) {
		t.Fatalf("update before issuing = %+v, %v", upd, err)
	}
	if upd, err = st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Issued: ptr(true)}); err != nil || !upd.Issued {
		t.Fatalf("mark issued = %+v, %v", upd, err)
	}
	for _, u := range []segment.BizUpdate{{Obfuscate: ptr(false)}, {Format: ptr(segment.FormatCode)}, {CodeMinLength: ptr(8)}} {
		if _, err := st.UpdateBiz(ctx(t), in.Name, u); !errors.Is(err, segment.ErrOutputLocked) {
			t.Fatalf("output change after issuing: %v, want ErrOutputLocked", err)
		}
	}
	if _, err := st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Issued: ptr(false)}); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("clearing issued: %v, want ErrInvalid", err)
	}
	// Unchanged values and other fields still update.
	if upd, err = st.UpdateBiz(ctx(t), in.Name, segment.BizUpdate{Obfuscate: ptr(true), Step: ptr(int64(77))}); err != nil || upd.Step != 77 {
		t.Fatalf("update of other fields after issuing = %+v, %v", upd, err)
	}
	got = mustGet(t, st, in.Name)
	if !got.Issued || !got.Obfuscate || got.Format != segment.FormatInt || !bytes.Equal(got.Key, created.Key) {
		t.Fatalf("after the refused updates: %+v", got)
	}
	// Invalid output settings.
	for _, b := range []segment.Biz{
		{Name: s.name("out-bad1"), Format: 7},
		{Name: s.name("out-bad2"), CodeMinLength: 14},
		{Name: s.name("out-bad3"), Plugins: []string{"Audit"}},
		{Name: s.name("out-bad4"), Plugins: []string{"a", "a"}},
	} {
		if _, err := st.CreateBiz(ctx(t), b); !errors.Is(err, segment.ErrInvalid) {
			t.Errorf("CreateBiz(%+v) = %v, want ErrInvalid", b, err)
		}
	}
}
