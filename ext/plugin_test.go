package ext

import (
	"context"
	"errors"
	"testing"

	"github.com/idgen/idgen/segment"
)

type nopPlugin struct {
	name  string
	order int
}

func (p nopPlugin) Name() string                        { return p.name }
func (p nopPlugin) Order() int                          { return p.order }
func (nopPlugin) Before(context.Context, *Call) error   { return nil }
func (nopPlugin) After(context.Context, *Call, *Result) {}
func (nopPlugin) OnError(context.Context, *Call, error) {}

// TestRegisterPlugin: names are unique and valid, a setting resolves in
// Order then name, and unknown names are reported.
func TestRegisterPlugin(t *testing.T) {
	r := NewRegistry()
	for _, p := range []nopPlugin{{"stats", 5}, {"audit", 5}, {"guard", 1}} {
		if err := r.RegisterPlugin(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.RegisterPlugin(nopPlugin{"audit", 0}); err == nil {
		t.Error("duplicate accepted")
	}
	if err := r.RegisterPlugin(nopPlugin{"Bad Name", 0}); err == nil {
		t.Error("invalid name accepted")
	}
	ps, unknown := r.Plugins([]string{"stats", "nope", "audit", "guard"})
	var got []string
	for _, p := range ps {
		got = append(got, p.Name())
	}
	if len(got) != 3 || got[0] != "guard" || got[1] != "audit" || got[2] != "stats" || len(unknown) != 1 || unknown[0] != "nope" {
		t.Fatalf("resolved %v unknown %v", got, unknown)
	}
	if err := r.CheckPlugins([]string{"audit", "nope"}); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("CheckPlugins: %v", err)
	}
	if err := r.CheckPlugins([]string{"audit", "stats"}); err != nil {
		t.Fatal(err)
	}
}
