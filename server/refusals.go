package server

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Bounds of what the refusal log keeps. A refusal's business and message
// come (partly) from the caller, so each is cut to a size a page row can
// show: a storm of refusals with megabyte business names must cost the
// node no more than a storm of short ones.
const (
	refusalRingSize = 50  // last refusals kept
	refusalBizMax   = 64  // characters of a business name kept
	refusalMsgMax   = 240 // characters of a message kept
	refusalCodesMax = 32  // distinct codes counted (the IDL has 11)
)

// refusal is one RPC the handler answered with an error code.
type refusal struct {
	At      time.Time
	Method  string
	Biz     string
	Code    string
	Message string
}

// codeCount is how many refusals carried one code since start.
type codeCount struct {
	Code  string
	Count uint64
}

// refusals is the node's short memory of refused RPCs for the status page:
// the last n in a ring and a count per code since start. The metrics hold
// the same counts as time series; this answers "what was refused just now,
// and why" without a metrics stack, which is what an operator asks first.
//
// It is safe for concurrent use and bounded whatever the callers send. A
// nil *refusals records nothing and reports nothing (handlers built by
// tests without a node).
type refusals struct {
	mu     sync.Mutex
	ring   []refusal // oldest overwritten first once full
	next   int       // where the next refusal goes once the ring is full
	total  uint64
	byCode map[string]uint64
}

func newRefusals(n int) *refusals {
	return &refusals{ring: make([]refusal, 0, max(n, 1)), byCode: make(map[string]uint64)}
}

// add records one refusal. The strings are cut and copied before the lock
// is taken, so the ring never pins a caller's large request in memory and
// the critical section is a few stores.
func (r *refusals) add(at time.Time, method, biz, code, msg string) {
	if r == nil {
		return
	}
	e := refusal{At: at, Method: method, Biz: clip(biz, refusalBizMax), Code: code, Message: clip(msg, refusalMsgMax)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	if _, ok := r.byCode[code]; ok || len(r.byCode) < refusalCodesMax {
		r.byCode[code]++
	} else {
		r.byCode["OTHER"]++
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, e)
		return
	}
	r.ring[r.next] = e
	r.next = (r.next + 1) % len(r.ring)
}

// recent returns the kept refusals, newest first.
func (r *refusals) recent() []refusal {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]refusal, 0, len(r.ring))
	// r.next is the oldest entry once the ring is full (0 before).
	for i := len(r.ring) - 1; i >= 0; i-- {
		out = append(out, r.ring[(r.next+i)%len(r.ring)])
	}
	return out
}

// counts returns the refusals per code since start, most frequent first,
// and their total.
func (r *refusals) counts() ([]codeCount, uint64) {
	if r == nil {
		return nil, 0
	}
	r.mu.Lock()
	out := make([]codeCount, 0, len(r.byCode))
	for c, n := range r.byCode {
		out = append(out, codeCount{Code: c, Count: n})
	}
	total := r.total
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b codeCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Code, b.Code))
	})
	return out, total
}

// clip returns s as valid UTF-8 cut to n runes and an ellipsis when
// longer. Its work is bounded by n, not by len(s), and a cut
// result is a copy, so it does not keep s's backing array alive.
func clip(s string, n int) string {
	cut := false
	if m := utf8.UTFMax * n; len(s) > m { // n runes never take more bytes
		for m > 0 && !utf8.RuneStart(s[m]) {
			m--
		}
		s, cut = s[:m], true
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	runes := 0
	for i := range s {
		if runes == n {
			s, cut = s[:i], true
			break
		}
		runes++
	}
	if !cut {
		return s
	}
	return strings.Clone(s) + "…"
}
