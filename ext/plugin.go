package ext

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/idgen/idgen/segment"
)

// ErrRejected is the typed refusal of a plugin's Before: wrap it
// (fmt.Errorf("...: %w", ext.ErrRejected)) to stop the request. Other
// errors from Before are logged and ignored (see the package doc).
var ErrRejected = errors.New("rejected by plugin")

// Call is one request as the plugins see it. The issuer fills it; plugins
// must treat it as read-only.
type Call struct {
	// Biz is a copy of the business's settings without its secrets: Key
	// (the obfuscation key) and Tokens (the client token hashes) are nil.
	// It is not the issuer's cached record: what a plugin does to it
	// cannot change the IDs, the tokens accepted or the plugins run.
	Biz       segment.Biz
	Channel   segment.Channel // the channel asked for (the business's default when unset)
	Count     int
	SubKey    string
	RequestID string
	// Caller is the remote address of the RPC ("" when unknown, e.g. an
	// embedding program calling the issuer directly).
	Caller string
	// Worker is the snowflake worker this node held when the call started
	// (-1: none).
	Worker int
	Start  time.Time
}

// Plugin intercepts the issuance of the businesses that enable it. See the
// package doc for the order and the failure handling.
type Plugin interface {
	// Name is the name businesses list in their plugins setting:
	// [a-z0-9_.-], 1..32 characters.
	Name() string
	// Order places the plugin among a business's plugins: smaller runs
	// first, ties by name.
	Order() int
	// Before may refuse the request with an error wrapping ErrRejected.
	Before(ctx context.Context, c *Call) error
	// After sees a copy of the issued result.
	After(ctx context.Context, c *Call, res *Result)
	// OnError sees why the request failed.
	OnError(ctx context.Context, c *Call, err error)
}

// RegisterPlugin registers p under p.Name(). A name already taken is
// refused: two plugins answering to one setting would be ambiguous.
func (r *Registry) RegisterPlugin(p Plugin) error {
	if p == nil {
		return fmt.Errorf("ext: nil plugin")
	}
	name := p.Name()
	if err := validPluginName(name); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.plugins[name]; ok {
		return fmt.Errorf("ext: plugin %q is already registered", name)
	}
	r.plugins[name] = p
	return nil
}

// PluginNames lists the registered plugin names, sorted.
func (r *Registry) PluginNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.plugins))
	for n := range r.plugins {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CheckPlugins refuses (with segment.ErrInvalid) a plugins setting naming
// a plugin that is not registered.
func (r *Registry) CheckPlugins(names []string) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, n := range names {
		if _, ok := r.plugins[n]; !ok {
			return fmt.Errorf("%w: plugin %q is not registered on this server (registered: %v)", segment.ErrInvalid, n, r.pluginNamesLocked())
		}
	}
	return nil
}

func (r *Registry) pluginNamesLocked() []string {
	out := make([]string, 0, len(r.plugins))
	for n := range r.plugins {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Plugins resolves a plugins setting: the registered ones in run order
// (Order, then name), and the names that are not registered.
func (r *Registry) Plugins(names []string) (ps []Plugin, unknown []string) {
	r.mu.RLock()
	for _, n := range names {
		if p, ok := r.plugins[n]; ok {
			ps = append(ps, p)
		} else {
			unknown = append(unknown, n)
		}
	}
	r.mu.RUnlock()
	sort.SliceStable(ps, func(i, j int) bool {
		if oi, oj := ps[i].Order(), ps[j].Order(); oi != oj {
			return oi < oj
		}
		return ps[i].Name() < ps[j].Name()
	})
	return ps, unknown
}

// validPluginName mirrors the store's rule for the plugins setting, so a
// registered plugin can always be named by a business.
func validPluginName(p string) error {
	if p == "" || len(p) > segment.MaxPluginNameLen {
		return fmt.Errorf("ext: plugin name %q: want 1..%d characters", p, segment.MaxPluginNameLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("ext: plugin name %q: want [a-z0-9_.-]", p)
		}
	}
	return nil
}
