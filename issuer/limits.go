package issuer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/logevery"
	"github.com/idgen/idgen/segment"
)

// Node-wide limits of auto-creation (Config.AutoCreateBiz).
const (
	// DefaultAutoCreateMax is Config.AutoCreateMax when left 0.
	DefaultAutoCreateMax = 256
	// AutoCreatePerSec and AutoCreateBurst bound how fast one node creates
	// businesses on first use: a caller inventing names cannot fill the
	// store (and every per-business structure) in a loop.
	AutoCreatePerSec = 5
	AutoCreateBurst  = 20
	// bizCountTTL is how long a count of the store's businesses is used
	// before ListBiz is called again (it reads every business).
	bizCountTTL = time.Second
	// autoCreateLogEvery is the most frequent auto-creation log line.
	autoCreateLogEvery = time.Second
)

// Limit names, the "limit" label of idgen_rate_limited_total and
// LimitError.Limit.
const (
	LimitRequests   = "requests"    // Biz.RateLimit, requests per second
	LimitIDs        = "ids"         // Biz.IDQuota, IDs per second
	LimitAutoCreate = "auto_create" // node-wide auto-creation rate
)

// LimitError is a refusal by a rate limit or quota. It wraps
// ErrRateLimited; RetryAfter is when the request would pass (if nothing
// else takes the capacity first).
type LimitError struct {
	Biz        string
	Limit      string // LimitRequests, LimitIDs or LimitAutoCreate
	RetryAfter time.Duration
	msg        string
}

func (e *LimitError) Error() string { return ErrRateLimited.Error() + ": " + e.msg }

// Unwrap makes errors.Is(err, ErrRateLimited) hold.
func (e *LimitError) Unwrap() error { return ErrRateLimited }

// bucket is a token bucket on an explicit clock (x/time/rate reads the wall
// clock, which tests cannot drive). Its rate and size are given on each
// call, so a business's changed settings apply at once and the tokens
// already earned carry over (capped by the new size).
type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
	init   bool
}

// take removes n tokens when available and returns 0; otherwise it leaves
// the bucket as it is and returns how long until n tokens are there.
// n must not exceed burst (the caller refuses such requests first).
func (b *bucket) take(now time.Time, perSec, burst, n float64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.init {
		b.tokens, b.last, b.init = burst, now, true
	}
	if now.After(b.last) {
		// A clock stepped back earns nothing, and does not take back.
		b.tokens += now.Sub(b.last).Seconds() * perSec
		b.last = now
	}
	b.tokens = min(b.tokens, burst)
	if b.tokens >= n {
		b.tokens -= n
		return 0
	}
	wait := time.Duration(math.Ceil((n - b.tokens) / perSec * float64(time.Second)))
	return max(wait, time.Millisecond)
}

// bizLimits are one business's buckets on this node.
type bizLimits struct {
	requests bucket
	ids      bucket
}

// allow applies the business's request rate and ID quota to a request for
// count IDs. Both are per node: a cluster of N nodes lets through about N
// times as much.
func (is *Issuer) allow(b segment.Biz, count int) error {
	if b.RateLimit <= 0 && b.IDQuota <= 0 {
		return nil
	}
	idBurst := b.IDBurst
	if idBurst <= 0 {
		idBurst = b.IDQuota
	}
	if b.IDQuota > 0 && int64(count) > idBurst {
		return fmt.Errorf("%w: count %d is above business %q's id_burst %d: such a request can never pass its ID quota; ask for at most %d IDs at a time or raise id_burst",
			ErrInvalid, count, b.Name, idBurst, idBurst)
	}
	v, ok := is.limits.Load(b.Name)
	if !ok {
		v, _ = is.limits.LoadOrStore(b.Name, &bizLimits{})
	}
	l := v.(*bizLimits)
	now := is.clk.Now()
	if b.RateLimit > 0 {
		if wait := l.requests.take(now, float64(b.RateLimit), float64(b.RateLimit), 1); wait > 0 {
			is.rateLimited.WithLabelValues(is.BizLabel(b.Name), LimitRequests).Inc()
			return &LimitError{Biz: b.Name, Limit: LimitRequests, RetryAfter: wait,
				msg: fmt.Sprintf("business %q allows %d requests per second per node: retry in %v", b.Name, b.RateLimit, wait)}
		}
	}
	if b.IDQuota > 0 {
		if wait := l.ids.take(now, float64(b.IDQuota), float64(idBurst), float64(count)); wait > 0 {
			is.rateLimited.WithLabelValues(is.BizLabel(b.Name), LimitIDs).Inc()
			return &LimitError{Biz: b.Name, Limit: LimitIDs, RetryAfter: wait,
				msg: fmt.Sprintf("business %q allows %d IDs per second per node (burst %d): %d IDs available in %v", b.Name, b.IDQuota, idBurst, count, wait)}
		}
	}
	return nil
}

// autoCreate bounds creation on first use: a cap on the store's
// businesses, a node-wide rate, and a rate-limited log line.
type autoCreate struct {
	max  int
	rate bucket

	mu        sync.Mutex
	count     int // businesses in the store, as of countedAt plus local creations
	counted   bool
	countedAt time.Time
	logs      *logevery.Limiter // on the issuer's clock, made in New
}

// reserveAutoCreate takes a slot for creating name on first use, or says
// why not. release undoes the reservation when the creation did not happen.
func (is *Issuer) reserveAutoCreate(ctx context.Context, name string) (release func(), err error) {
	a := &is.auto
	now := is.clk.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.counted || now.Sub(a.countedAt) >= bizCountTTL || now.Before(a.countedAt) {
		bs, lerr := is.cfg.Store.ListBiz(ctx)
		switch {
		case lerr == nil:
			a.count, a.counted = len(bs), true
		case !a.counted:
			return nil, fmt.Errorf("business %q does not exist and the businesses could not be counted before creating it on first use: %w", name, lerr)
		}
		// On failure the stale count serves; the list is tried again a
		// TTL later, not on every request.
		a.countedAt = now
	}
	if a.count >= a.max {
		return nil, fmt.Errorf("%w: business %q does not exist and the auto-creation limit was reached (the store holds %d businesses, auto_create_max %d): create it with `idctl biz create %s`",
			segment.ErrUnknownBiz, name, a.count, a.max, name)
	}
	if wait := a.rate.take(now, AutoCreatePerSec, AutoCreateBurst, 1); wait > 0 {
		return nil, &LimitError{Biz: name, Limit: LimitAutoCreate, RetryAfter: wait,
			msg: fmt.Sprintf("business %q does not exist and this node creates at most %d businesses per second on first use: retry in %v, or create it with `idctl biz create %s`",
				name, AutoCreatePerSec, wait, name)}
	}
	a.count++
	return func() {
		a.mu.Lock()
		a.count--
		a.mu.Unlock()
	}, nil
}

// noteCreated counts a business created through this node (the cached
// count then stays right until the next list).
func (is *Issuer) noteCreated() {
	a := &is.auto
	a.mu.Lock()
	a.count++
	a.mu.Unlock()
}

// logAutoCreated logs at most one creation on first use per second, with
// the number of creations not logged since the last line: enough to see
// that it happens, without letting callers inventing names flood the log.
func (is *Issuer) logAutoCreated(name string) {
	ok, skipped := is.auto.logs.Allow("auto_create")
	if !ok {
		return
	}
	is.log.Info("business created on first use", zap.String("biz", name), zap.Int("not_logged_since_last", skipped),
		zap.String("hint", "create businesses with 'idctl biz create' and turn auto-creation off in production"))
}
