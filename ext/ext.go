// Package ext is how a Go program extends idgen without a fork: it
// registers its own strategies (ways of issuing numbers, one per channel
// value) and rejection handlers in a Registry, and hands the Registry to
// the issuer (issuer.Config.Extensions).
//
// A strategy serves one channel value. The built-ins are UNORDERED (0),
// ORDERED (1) with its alias SLOW_ORDERED (3), and SNOWFLAKE (2); custom
// strategies take other values (16..127 are left to users). A strategy that
// cannot serve returns an error: the refusal goes through the chain of
// rejection handlers in the order they were added; the first that returns
// handled=true answers instead (the SNOWFLAKE fallback to the business's
// segment is such a handler), otherwise the caller gets the strategy's
// error. The default chain logs and counts every refusal.
//
// # Plugins
//
// A Plugin is an interceptor around one business's issuance (an audit
// trail, issuance metrics, a policy check). Plugins are registered by name
// in code (Registry.RegisterPlugin) and enabled per business by its
// plugins setting; a business names only registered plugins (the issuer
// refuses an unknown name when the business is created or updated; a name
// stored by a node with another registry is logged once and ignored). The
// enabled plugins run in Order, smallest first, ties by name:
//
//   - Before runs before any number is issued. Returning an error that
//     wraps ErrRejected refuses the request (the caller gets
//     PERMISSION_DENIED with the error's message) and no later Before runs.
//     Any other error is a broken plugin, not a decision: it is logged and
//     counted and issuance goes on (fail-open, so a plugin cannot stop ID
//     issuance by accident).
//   - After runs once the numbers are issued, with a copy of the result:
//     it cannot change the IDs nor fail the request.
//   - OnError runs when the request failed (a strategy's error, or a
//     Before rejection); it cannot change the error.
//
// A panic in any hook is recovered, logged and counted
// (idgen_plugin_failures_total{plugin,hook}); the request goes on as if the
// hook had returned nil. Hooks run on the request's goroutine: they must be
// fast and must not block (hand slow work, such as writing a file, to a
// goroutine of the plugin's own, and drop when it is behind).
package ext

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/idgen/idgen/segment"
)

// Request is one call to a strategy. Count is 1..max_batch.
type Request struct {
	Biz       segment.Biz
	Channel   segment.Channel // the channel asked for (the strategy's value)
	Count     int
	SubKey    string
	RequestID string
	// RequestScope is the fingerprint of the credential the request
	// carried (issuer.RequestScope; "" without one). A strategy that keeps
	// request ids keys them by (RequestScope, RequestID), so that callers
	// never meet through an id (segment.RequestID).
	RequestScope string
}

// Result is the numbers a strategy issued, as inclusive ranges of distinct
// numbers in [1, 2^63). Channel is the channel that served (a rejection
// handler may serve from another one) and Fallback says a handler served.
type Result struct {
	Ranges   []segment.Range
	Channel  segment.Channel
	Fallback bool
	Refusal  error // why the strategy refused, when a handler served
}

// Strategy issues numbers for one channel value. Generate must never hand
// out a number twice for a business (across calls, restarts and nodes):
// that is the whole product, and the issuer cannot check it.
type Strategy interface {
	// Name is the lowercase name used in logs, metrics and the CLI.
	Name() string
	// Generate issues req.Count numbers, or refuses with an error.
	Generate(ctx context.Context, req Request) (Result, error)
}

// RejectionHandler sees a strategy's refusal. It returns handled=true with
// a Result to answer instead, or handled=false to pass the refusal on.
type RejectionHandler interface {
	Rejected(ctx context.Context, req Request, strategy string, refusal error) (res Result, handled bool, err error)
}

// RejectionFunc adapts a function to RejectionHandler.
type RejectionFunc func(ctx context.Context, req Request, strategy string, refusal error) (Result, bool, error)

// Rejected implements RejectionHandler.
func (f RejectionFunc) Rejected(ctx context.Context, req Request, strategy string, refusal error) (Result, bool, error) {
	return f(ctx, req, strategy, refusal)
}

// Registry holds strategies by channel value and the rejection chain. It is
// safe for concurrent use; register before serving.
type Registry struct {
	mu         sync.RWMutex
	strategies map[segment.Channel]Strategy
	handlers   []RejectionHandler
	plugins    map[string]Plugin
}

// NewRegistry returns an empty Registry (the issuer adds its built-ins to
// the values left free).
func NewRegistry() *Registry {
	return &Registry{strategies: map[segment.Channel]Strategy{}, plugins: map[string]Plugin{}}
}

// RegisterStrategy serves channel ch with s. A value already taken is
// refused: replacing a channel silently could hand out a number twice.
func (r *Registry) RegisterStrategy(ch segment.Channel, s Strategy) error {
	if ch < 0 {
		return fmt.Errorf("ext: channel %d: want 0..127", ch)
	}
	if s == nil {
		return fmt.Errorf("ext: channel %d: nil strategy", ch)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.strategies[ch]; ok {
		return fmt.Errorf("ext: channel %d is already served by %q", ch, old.Name())
	}
	r.strategies[ch] = s
	return nil
}

// AddRejectionHandler appends h to the rejection chain.
func (r *Registry) AddRejectionHandler(h RejectionHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers = append(r.handlers, h)
}

// Strategy returns the strategy of ch.
func (r *Registry) Strategy(ch segment.Channel) (Strategy, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.strategies[ch]
	return s, ok
}

// Has reports whether ch has a strategy.
func (r *Registry) Has(ch segment.Channel) bool {
	_, ok := r.Strategy(ch)
	return ok
}

// Channels lists the registered channel values in order.
func (r *Registry) Channels() []segment.Channel {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]segment.Channel, 0, len(r.strategies))
	for ch := range r.strategies {
		out = append(out, ch)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// describe lists the registered channels by number and strategy name:
// "0 (unordered), 3 (slow_ordered)". segment.Channel's String knows only
// 0..2, so %v would call every other channel "unknown".
func (r *Registry) describe() string {
	chs := r.Channels()
	parts := make([]string, 0, len(chs))
	for _, ch := range chs {
		s, _ := r.Strategy(ch)
		parts = append(parts, fmt.Sprintf("%d (%s)", int(ch), s.Name()))
	}
	return strings.Join(parts, ", ")
}

// Serve runs the strategy of req.Channel and, on a refusal, the rejection
// chain: the handlers in first (the issuer's built-ins: log and metric,
// snowflake fallback), then the registered ones.
func (r *Registry) Serve(ctx context.Context, req Request, first ...RejectionHandler) (Result, error) {
	s, ok := r.Strategy(req.Channel)
	if !ok {
		return Result{}, fmt.Errorf("%w: channel %d has no strategy (registered: %s)", segment.ErrInvalid, req.Channel, r.describe())
	}
	res, err := s.Generate(ctx, req)
	if err == nil {
		return res, nil
	}
	r.mu.RLock()
	hs := append(first[:len(first):len(first)], r.handlers...)
	r.mu.RUnlock()
	for _, h := range hs {
		out, handled, herr := h.Rejected(ctx, req, s.Name(), err)
		if herr != nil {
			return Result{}, herr
		}
		if handled {
			return out, nil
		}
	}
	return Result{}, err
}
