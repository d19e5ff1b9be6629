package issuer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/issuer/keywrap"
	"github.com/idgen/idgen/issuer/obfuscate"
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

// scrubPlugin reads the secrets of the business it is handed, then
// scribbles over everything it can reach of it.
type scrubPlugin struct {
	mu        sync.Mutex
	sawKey    int // calls whose Call carried key bytes
	sawTokens int // calls whose Call carried token hashes
	calls     int
}

func (p *scrubPlugin) Name() string { return "scrub" }
func (p *scrubPlugin) Order() int   { return 0 }
func (p *scrubPlugin) scrub(c *ext.Call) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if len(c.Biz.Key) > 0 {
		p.sawKey++
	}
	for _, tk := range c.Biz.Tokens {
		if len(tk.Hash) > 0 {
			p.sawTokens++
			break
		}
	}
	clear(c.Biz.Key)
	for i := range c.Biz.Tokens {
		clear(c.Biz.Tokens[i].Hash)
	}
	for i := range c.Biz.Plugins {
		c.Biz.Plugins[i] = "nope"
	}
	c.Biz.Obfuscate, c.Biz.Format = false, segment.FormatCode
}
func (p *scrubPlugin) Before(_ context.Context, c *ext.Call) error         { p.scrub(c); return nil }
func (p *scrubPlugin) After(_ context.Context, c *ext.Call, _ *ext.Result) { p.scrub(c) }
func (p *scrubPlugin) OnError(_ context.Context, c *ext.Call, _ error)     { p.scrub(c) }

// TestPluginsGetNoSecrets: a plugin is handed the business without its
// obfuscation key and token hashes, and nothing it does to the business it
// is handed reaches the issuer: the outputs stay those of the stored key,
// the token still opens the business, the plugin still runs. Before the
// fix the plugin saw the key (and the token hashes) of the cached business,
// and zeroing them changed this node's cipher (plain key) or made it refuse
// the business (wrapped key), and locked the caller out.
func TestPluginsGetNoSecrets(t *testing.T) {
	for _, wrapped := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain key", true: "wrapped key"}[wrapped], func(t *testing.T) {
			p := &scrubPlugin{}
			reg := ext.NewRegistry()
			if err := reg.RegisterPlugin(p); err != nil {
				t.Fatal(err)
			}
			var mk *keywrap.Key
			if wrapped {
				mk = masterKey(t, "cluster")
			}
			f := newIssuer(t, func(c *Config) {
				c.Extensions, c.MasterKey = reg, mk
				c.Bizs = segment.NewBizCache(c.Store, time.Hour) // one cached record for the whole test
			})
			ctx := context.Background()
			if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "obf", Channel: segment.ChannelUnordered, Obfuscate: true,
				Plugins: []string{"scrub"}}); err != nil {
				t.Fatal(err)
			}
			_, secret, err := f.is.CreateBizToken(ctx, "obf", "caller")
			if err != nil {
				t.Fatal(err)
			}
			// The business has issued before (on another node, or before
			// a restart): this node builds its cipher from the cached
			// record, not from the store's answer to the first mark.
			yes := true
			stored, err := f.store.UpdateBiz(ctx, "obf", segment.BizUpdate{Issued: &yes})
			if err != nil {
				t.Fatal(err)
			}
			f.is.cfg.Bizs.Invalidate("obf")
			key, err := f.is.businessKey(stored)
			if err != nil {
				t.Fatal(err)
			}
			cipher, err := obfuscate.New(slices.Clone(key))
			if err != nil {
				t.Fatal(err)
			}
			next := int64(1) // UNORDERED numbers from start_num 1
			for call := 1; call <= 3; call++ {
				resp, err := f.is.Next(ctx, Request{Biz: "obf", Count: 4, Token: secret})
				if err != nil {
					t.Fatalf("call %d after a plugin scrubbed its business: %v", call, err)
				}
				if len(resp.IDs) != 4 {
					t.Fatalf("call %d: %+v, want 4 obfuscated IDs", call, resp)
				}
				for _, id := range resp.IDs {
					if got, err := cipher.DecodeID(id); err != nil || got != next {
						t.Fatalf("call %d: ID %d decodes to %d (%v) under the stored key, want %d: the plugin changed the cipher", call, id, got, err, next)
					}
					next++
				}
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.calls != 6 {
				t.Fatalf("plugin hooks ran %d times, want 6 (Before and After of 3 calls)", p.calls)
			}
			if p.sawKey != 0 || p.sawTokens != 0 {
				t.Fatalf("plugin saw the key in %d calls and token hashes in %d, want none", p.sawKey, p.sawTokens)
			}
			if b, _ := f.is.cfg.Bizs.Get(ctx, "obf"); !bytes.Equal(b.Key, stored.Key) || !b.Obfuscate || !slices.Equal(b.Plugins, []string{"scrub"}) {
				t.Fatalf("the cached business was changed by the plugin")
			}
		})
	}
}

// BenchmarkNextWithPlugin: one UNORDERED ID per call for a business with a
// plugin enabled (the cost of building the plugins' view of the call).
func BenchmarkNextWithPlugin(b *testing.B) {
	reg := ext.NewRegistry()
	if err := reg.RegisterPlugin(&recPlugin{name: "rec", log: new([]string), mu: &sync.Mutex{}}); err != nil {
		b.Fatal(err)
	}
	f := newIssuer(b, func(c *Config) {
		c.Extensions = reg
		c.Bizs = segment.NewBizCache(c.Store, time.Hour) // no store reads in the loop
	})
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "plug", Channel: segment.ChannelUnordered, Step: 1_000_000, Obfuscate: true,
		Plugins: []string{"rec"}}); err != nil {
		b.Fatal(err)
	}
	req := Request{Biz: "plug", Count: 1}
	for b.Loop() {
		if _, err := f.is.Next(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
