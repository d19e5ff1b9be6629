package issuer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/segment"
)

// recPlugin records its calls in a shared log and misbehaves on demand.
type recPlugin struct {
	name   string
	order  int
	log    *[]string
	mu     *sync.Mutex
	before error
	panics string // hook that panics
	mutate bool   // After scribbles on the result
}

func (p *recPlugin) Name() string { return p.name }
func (p *recPlugin) Order() int   { return p.order }
func (p *recPlugin) note(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*p.log = append(*p.log, p.name+"."+s)
}
func (p *recPlugin) Before(_ context.Context, c *ext.Call) error {
	p.note("before")
	if p.panics == "before" {
		panic("boom")
	}
	return p.before
}
func (p *recPlugin) After(_ context.Context, c *ext.Call, res *ext.Result) {
	p.note("after")
	if p.panics == "after" {
		panic("boom")
	}
	if p.mutate {
		for i := range res.Ranges {
			res.Ranges[i] = segment.Range{First: 1, Last: 1}
		}
		res.Ranges = nil
	}
}
func (p *recPlugin) OnError(_ context.Context, c *ext.Call, err error) {
	p.note("on_error")
	if p.panics == "on_error" {
		panic("boom")
	}
}

// TestPluginsOrderFailuresAndRejection (issue 14 item 2): plugins run in
// Order then name; a panic or a plain Before error is recovered, counted
// and ignored (fail-open); After cannot change the IDs; a typed rejection
// stops issuance and runs OnError.
func TestPluginsOrderFailuresAndRejection(t *testing.T) {
	var log []string
	mu := &sync.Mutex{}
	reg := ext.NewRegistry()
	mk := func(name string, order int) *recPlugin {
		p := &recPlugin{name: name, order: order, log: &log, mu: mu}
		if err := reg.RegisterPlugin(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b := mk("b", 1)
	a := mk("a", 1)
	z := mk("z", 0)
	if err := reg.RegisterPlugin(&recPlugin{name: "a"}); err == nil {
		t.Fatal("duplicate plugin name accepted")
	}
	f := newIssuer(t, func(c *Config) { c.Extensions = reg })
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "bad", Plugins: []string{"nope"}}); !errors.Is(err, segment.ErrInvalid) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown plugin: %v, want ErrInvalid naming it", err)
	}
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "p", Channel: segment.ChannelUnordered, Plugins: []string{"b", "a", "z"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.is.UpdateBiz(ctx, "p", segment.BizUpdate{Plugins: &[]string{"a", "nope"}}); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("update to an unknown plugin: %v, want ErrInvalid", err)
	}
	// Broken plugins: a Before error, a Before panic and an After that
	// scribbles on its copy.
	a.before = errors.New("database down")
	b.panics = "before"
	z.mutate = true
	resp, err := f.is.Next(ctx, Request{Biz: "p", Count: 5, Caller: "192.0.2.1:1"})
	if err != nil {
		t.Fatalf("a broken plugin stopped issuance: %v", err)
	}
	if len(resp.Ranges) != 1 || resp.Count() != 5 || resp.Ranges[0].Len() != 5 {
		t.Fatalf("plugin changed the IDs: %+v", resp)
	}
	want := "z.before a.before b.before z.after a.after b.after"
	if got := strings.Join(log, " "); got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if got := failures(f.is, "a", "before") + failures(f.is, "b", "before"); got != 2 {
		t.Fatalf("%v before failures counted, want 2", got)
	}
	b.panics = "after"
	if _, err := f.is.Next(ctx, Request{Biz: "p", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if got := failures(f.is, "b", "after"); got != 1 {
		t.Fatalf("after panics %v, want 1", got)
	}

	// A typed rejection stops the request before any number is issued.
	log = nil
	a.before = fmt.Errorf("caller not allowed: %w", ext.ErrRejected)
	b.panics = "on_error"
	_, err = f.is.Next(ctx, Request{Biz: "p", Count: 1})
	if !errors.Is(err, ext.ErrRejected) || !strings.Contains(err.Error(), "caller not allowed") {
		t.Fatalf("rejection: %v", err)
	}
	want = "z.before a.before z.on_error a.on_error b.on_error"
	if got := strings.Join(log, " "); got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}
	// The next number follows on: the refused request took none.
	a.before = nil
	b.panics = ""
	resp2, err := f.is.Next(ctx, Request{Biz: "p", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if resp2.Ranges[0].First != resp.Ranges[0].Last+2 {
		t.Fatalf("after a rejection got %v, want %d", resp2.Ranges, resp.Ranges[0].Last+2)
	}
}

func failures(is *Issuer, plugin, hook string) float64 {
	return counterValue(is.plugins.failures.WithLabelValues(plugin, hook))
}

// counterValue reads c through a registry (no client_model import).
func counterValue(c prometheus.Counter) float64 {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var v float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}
