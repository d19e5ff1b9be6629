package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNotPrefetchable: a business in Config.Prefetch.Bizs answers in a form
// the prefetch buffer cannot hand out through Next and NextN, which return
// integers: codes (its format is code). The error names the business; the
// fix is to remove it from Prefetch.Bizs and call Fetch (Result.Codes).
// The buffer finds out on its first refill (the client cannot know a
// business's format before it answers); from then on every prefetched call
// of that business and channel fails with it at once, without asking the
// cluster again. Not retryable.
//
// A business with obfuscated integer IDs is prefetched: each ID is kept as
// a value (obfuscated IDs are distinct but not contiguous), NextN returns
// them as ranges of one ID, and MaxAge applies as to plain SNOWFLAKE IDs,
// by the time the request that fetched them was sent.
var ErrNotPrefetchable = errors.New("idgen client: business cannot be prefetched")

// bizPools are the prefetch buffers of one business: def serves calls that
// name no channel.
type bizPools struct {
	def *pool
	all []*pool
}

// pool is the prefetch buffer of one (business, channel). One mutex guards
// it: taking an ID is a few instructions under it, and an ID leaves the
// buffer under the lock, so no ID is handed out twice.
type pool struct {
	c      *Client
	biz    string
	ch     Channel
	maxAge time.Duration // > 0: SNOWFLAKE IDs older than this are dropped

	mu      sync.Mutex
	spans   []span // IDs not handed out yet, oldest first, from head on
	head    int
	avail   int64
	size    int64 // the adaptive target size of the buffer
	cur     *refill
	arrived chan struct{} // closed and replaced each time a refill adds IDs
	closed  bool
	refused error     // ErrNotPrefetchable, for good: calls fail with it at once
	taken   int64     // IDs handed out since the last refill started
	takenAt time.Time // when that refill started
}

// span is a range of prefetched IDs still to hand out: the IDs next..last,
// or, with vals (the obfuscated IDs of one answer), vals[next..last].
type span struct {
	next, last int64
	vals       []int64
	at         time.Time // when the request that fetched it was sent
}

// id returns the ID at position i of s.
func (s *span) id(i int64) int64 {
	if s.vals != nil {
		return s.vals[i]
	}
	return i
}

// refill is one background refill; done is closed when it ends.
type refill struct {
	done chan struct{}
	err  error
}

func (c *Client) newPools() (map[string]*bizPools, error) {
	out := map[string]*bizPools{}
	pc := c.cfg.Prefetch
	for _, b := range pc.Bizs {
		bp := out[b.Biz]
		if bp == nil {
			bp = &bizPools{}
			out[b.Biz] = bp
		}
		for _, p := range bp.all {
			if p.ch == b.Channel {
				return nil, fmt.Errorf("%w: Prefetch.Bizs lists %s %v twice", ErrInvalid, b.Biz, b.Channel)
			}
		}
		p := &pool{c: c, biz: b.Biz, ch: b.Channel, size: int64(pc.MinBuffer), arrived: make(chan struct{})}
		if b.Channel == Snowflake && pc.MaxAge > 0 {
			p.maxAge = pc.MaxAge
		}
		if bp.def == nil {
			bp.def = p
		}
		bp.all = append(bp.all, p)
	}
	return out, nil
}

// pool returns the buffer a call uses, or nil.
func (c *Client) pool(biz string, o callOpts) *pool {
	if c.pools == nil || o.subKey != "" || o.requestID != "" {
		return nil
	}
	bp := c.pools[biz]
	if bp == nil {
		return nil
	}
	if o.channel == nil {
		return bp.def
	}
	for _, p := range bp.all {
		if p.ch == *o.channel {
			return p
		}
	}
	return nil
}

// next hands out one ID.
func (p *pool) next(ctx context.Context) (int64, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return 0, ErrClosed
		}
		if p.refused != nil {
			p.mu.Unlock()
			return 0, p.refused
		}
		if id, ok := p.take1(); ok {
			p.mu.Unlock()
			return id, nil
		}
		if err := p.wait(ctx); err != nil { // unlocks
			return 0, err
		}
	}
}

// take hands out n IDs as ranges (obfuscated IDs as ranges of one, or of
// more where values happen to follow each other). If the buffer runs dry
// before n and the refill fails, the IDs taken so far are dropped (gaps)
// and the error returned.
func (p *pool) take(ctx context.Context, n int64) ([]Range, error) {
	var out []Range
	for n > 0 {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if p.refused != nil {
			p.mu.Unlock()
			return nil, p.refused
		}
		for n > 0 && p.skipStale() {
			s := &p.spans[p.head]
			k := min(n, s.last-s.next+1)
			if s.vals == nil {
				out = appendRange(out, Range{s.next, s.next + k - 1})
			} else {
				for _, v := range s.vals[s.next : s.next+k] {
					out = appendRange(out, Range{v, v})
				}
			}
			s.next += k
			p.avail -= k
			p.taken += k
			n -= k
			if s.next > s.last {
				p.head++
			}
		}
		p.maybeRefill()
		if n == 0 {
			p.mu.Unlock()
			return out, nil
		}
		if err := p.wait(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// appendRange appends r to out, merged into the last range when it follows
// it.
func appendRange(out []Range, r Range) []Range {
	if len(out) > 0 && out[len(out)-1].Last+1 == r.First {
		out[len(out)-1].Last = r.Last
		return out
	}
	return append(out, r)
}

// take1 takes one ID (p.mu held) and starts a refill at the low-water
// mark.
func (p *pool) take1() (int64, bool) {
	if !p.skipStale() {
		p.maybeRefill()
		return 0, false
	}
	s := &p.spans[p.head]
	id := s.id(s.next)
	s.next++
	p.avail--
	p.taken++
	if s.next > s.last {
		p.head++
	}
	p.maybeRefill()
	return id, true
}

// skipStale drops spent spans and, on SNOWFLAKE, spans older than maxAge;
// it reports whether an ID is left (p.mu held).
func (p *pool) skipStale() bool {
	for p.head < len(p.spans) {
		s := &p.spans[p.head]
		if s.next <= s.last && (p.maxAge <= 0 || time.Since(s.at) <= p.maxAge) {
			return true
		}
		p.avail -= s.last - s.next + 1
		p.head++
	}
	clear(p.spans) // drop the spent answers' values
	p.spans = p.spans[:0]
	p.head = 0
	return false
}

// maybeRefill starts a refill when the buffer is at or below half its size
// and none is running (p.mu held).
func (p *pool) maybeRefill() {
	if p.cur != nil || p.avail > p.size/2 || p.closed {
		return
	}
	r := &refill{done: make(chan struct{})}
	p.cur = r
	p.c.wg.Add(1)
	go p.refill(r)
}

// wait starts a refill if none is running and waits until it adds IDs or
// ends (p.mu held on entry, released on return). It returns the refill's
// error if it failed.
func (p *pool) wait(ctx context.Context) error {
	if p.cur == nil {
		r := &refill{done: make(chan struct{})}
		p.cur = r
		p.c.wg.Add(1)
		go p.refill(r)
	}
	r, arrived := p.cur, p.arrived
	p.mu.Unlock()
	select {
	case <-arrived:
		return nil
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refill tops the buffer up to its size, one request of at most MaxBatch
// IDs after another, and adapts the size to the rate since the previous
// refill.
func (p *pool) refill(r *refill) {
	defer p.c.wg.Done()
	defer close(r.done)
	pc := p.c.cfg.Prefetch
	p.mu.Lock()
	now := time.Now()
	if !p.takenAt.IsZero() {
		if dt := now.Sub(p.takenAt); dt > 0 {
			rate := float64(p.taken) / dt.Seconds()
			want := int64(rate * pc.Window.Seconds())
			// Grow fast, shrink slowly.
			if want < p.size {
				want = (p.size + want) / 2
			}
			p.size = min(max(want, int64(pc.MinBuffer)), int64(pc.MaxBuffer))
		}
	}
	p.taken, p.takenAt = 0, now
	p.mu.Unlock()
	ch := p.ch
	for {
		p.mu.Lock()
		need := p.size - p.avail
		closed := p.closed
		p.mu.Unlock()
		if closed || need <= 0 {
			break
		}
		n := int(min(need, int64(pc.MaxBatch)))
		ctx, cancel := context.WithTimeout(p.c.bg, p.c.cfg.CallTimeout)
		sent := time.Now()
		res, err := p.c.fetch(ctx, p.biz, n, callOpts{channel: &ch})
		cancel()
		if err == nil {
			err = p.usable(res)
		}
		p.mu.Lock()
		if err != nil {
			if errors.Is(err, ErrNotPrefetchable) {
				p.refused = err
			}
			r.err = err
			p.cur = nil
			p.mu.Unlock()
			return
		}
		if !p.closed {
			if p.head > 0 && p.head*2 >= len(p.spans) {
				k := copy(p.spans, p.spans[p.head:])
				clear(p.spans[k:])
				p.spans = p.spans[:k]
				p.head = 0
			}
			for _, rg := range res.Ranges {
				p.spans = append(p.spans, span{next: rg.First, last: rg.Last, at: sent})
				p.avail += rg.Len()
			}
			if len(res.IDs) > 0 {
				p.spans = append(p.spans, span{next: 0, last: int64(len(res.IDs)) - 1, vals: res.IDs, at: sent})
				p.avail += int64(len(res.IDs))
			}
			close(p.arrived)
			p.arrived = make(chan struct{})
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.cur = nil
	p.mu.Unlock()
}

// usable checks that a refill's answer is one the buffer can hand out:
// plain ranges, or obfuscated IDs, with at least one ID. Anything else ends
// the refill with an error; asking again would get the same answer.
func (p *pool) usable(res Result) error {
	switch {
	case len(res.Codes) > 0:
		return fmt.Errorf("%w: business %q answers codes (its format is code) and Next and NextN hand out integers: "+
			"remove %s %v from Config.Prefetch.Bizs and use Fetch (Result.Codes)", ErrNotPrefetchable, p.biz, p.biz, p.ch)
	case len(res.Ranges) > 0 && len(res.IDs) > 0:
		return fmt.Errorf("idgen %s: the answer for business %q holds both ranges and ids: the prefetch buffer cannot use it", res.Addr, p.biz)
	case len(res.Ranges) == 0 && len(res.IDs) == 0:
		return fmt.Errorf("idgen %s: the answer for business %q holds no IDs", res.Addr, p.biz)
	}
	return nil
}

// close drops the buffer: the IDs in it are never handed out.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.spans, p.head, p.avail = nil, 0, 0
	p.mu.Unlock()
}
