package issuer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/segment"
)

// pluginSet is a business's resolved plugins, cached while its setting is
// unchanged.
type pluginSet struct {
	names []string
	ps    []ext.Plugin
}

// pluginState is the issuer's plugin bookkeeping.
type pluginState struct {
	sets     sync.Map // biz name -> *pluginSet
	unknown  sync.Map // "biz/plugin" -> struct{}: logged once
	failures *prometheus.CounterVec
}

func newPluginState() pluginState {
	return pluginState{failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_plugin_failures_total",
		Help: "Plugin hooks that panicked (recovered) or, for before, returned an error other than a rejection (ignored: fail-open)."},
		[]string{"plugin", "hook"})}
}

// pluginsOf returns the plugins b enables, in run order (nil for most
// businesses: then the hot path pays one length check), and the set they
// were resolved from.
func (is *Issuer) pluginsOf(b segment.Biz) ([]ext.Plugin, *pluginSet) {
	if len(b.Plugins) == 0 {
		return nil, nil
	}
	if v, ok := is.plugins.sets.Load(b.Name); ok {
		if s := v.(*pluginSet); slices.Equal(s.names, b.Plugins) {
			return s.ps, s
		}
	}
	ps, unknown := is.ext.Plugins(b.Plugins)
	for _, n := range unknown {
		if _, seen := is.plugins.unknown.LoadOrStore(b.Name+"/"+n, struct{}{}); !seen {
			is.log.Warn("business enables a plugin that is not registered on this node: ignored", zap.String("biz", b.Name),
				zap.String("plugin", n), zap.Strings("registered", is.ext.PluginNames()),
				zap.String("fix", "register the plugin on every node, or remove it with 'idctl biz update --plugins'"))
		}
	}
	s := &pluginSet{names: slices.Clone(b.Plugins), ps: ps}
	is.plugins.sets.Store(b.Name, s)
	return ps, s
}

// pluginView is the business as a plugin sees it (ext.Call.Biz): a copy
// without its secrets (the obfuscation key, the token hashes) and with a
// plugins list of its own. The cached record shares its slices with every
// request: a plugin that scrubbed the key it was handed would change this
// node's cipher, and one that wrote to a shared list would race with the
// other requests reading it. The list's copy is the only allocation, paid
// only by businesses that run plugins.
func pluginView(b segment.Biz, s *pluginSet) segment.Biz {
	b.Key, b.Tokens = nil, nil
	b.Plugins = slices.Clone(s.names)
	b.Channels = slices.Clone(b.Channels) // the cached business's own slice
	return b
}

// runBefore runs the Before hooks in order. It returns the first typed
// rejection; other errors and panics are logged, counted and ignored.
func (is *Issuer) runBefore(ctx context.Context, ps []ext.Plugin, c *ext.Call) error {
	for _, p := range ps {
		err := is.guard(p, "before", func() error { return p.Before(ctx, c) })
		if err == nil {
			continue
		}
		if errors.Is(err, ext.ErrRejected) {
			return fmt.Errorf("plugin %s: %w", p.Name(), err)
		}
		is.plugins.failures.WithLabelValues(p.Name(), "before").Inc()
		is.log.Warn("plugin before failed: ignored (fail-open)", zap.String("plugin", p.Name()), zap.String("biz", c.Biz.Name), zap.Error(err))
	}
	return nil
}

// runAfter runs the After hooks, each with its own copy of res.
func (is *Issuer) runAfter(ctx context.Context, ps []ext.Plugin, c *ext.Call, res ext.Result) {
	for _, p := range ps {
		cp := res
		cp.Ranges = slices.Clone(res.Ranges)
		_ = is.guard(p, "after", func() error { p.After(ctx, c, &cp); return nil })
	}
}

// runOnError runs the OnError hooks.
func (is *Issuer) runOnError(ctx context.Context, ps []ext.Plugin, c *ext.Call, err error) {
	for _, p := range ps {
		_ = is.guard(p, "on_error", func() error { p.OnError(ctx, c, err); return nil })
	}
}

// guard runs one hook, turning a panic into a logged, counted nil.
func (is *Issuer) guard(p ext.Plugin, hook string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			is.plugins.failures.WithLabelValues(p.Name(), hook).Inc()
			is.log.Error("plugin panicked: recovered, request goes on", zap.String("plugin", p.Name()), zap.String("hook", hook),
				zap.Any("panic", v), zap.StackSkip("stack", 2))
			err = nil
		}
	}()
	return f()
}
