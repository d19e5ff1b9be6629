// Package checker judges a history of NextIDs calls recorded by the fault
// suite's load generator. It is independent of the service's code on
// purpose: it decodes snowflake IDs from the documented layout
// (0 | 41 bits ms | 10 bits worker | 12 bits sequence) and knows nothing of
// the generator, the segment store or the issuer, so a bug there cannot hide
// itself here.
package checker

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Channel names as the load generator records them (the IDL's enum names).
const (
	Unordered = "UNORDERED"
	Ordered   = "ORDERED"
	Snowflake = "SNOWFLAKE"
)

// Refusal is the typed error a node answered with (IdgenError).
type Refusal struct {
	Code         int32  `json:"code"`
	Retryable    bool   `json:"retryable"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	Message      string `json:"message"`
}

// Call is one NextIDs call as the load generator saw it.
type Call struct {
	Caller  string `json:"caller"`  // one sequential caller (goroutine)
	Node    string `json:"node"`    // node the call was sent to
	Inc     int    `json:"inc"`     // node incarnation (process start number); -1 unknown
	Biz     string `json:"biz"`     // business
	SubKey  string `json:"sub_key"` // ORDERED only
	Channel string `json:"channel"` // requested channel
	// Count is how many numbers the call asked for (0: not recorded).
	Count int32 `json:"count,omitempty"`
	// Answer (Ranges set): the channel that served and the fallback flag.
	Served   string     `json:"served,omitempty"`
	Fallback bool       `json:"fallback,omitempty"`
	Ranges   [][2]int64 `json:"ranges,omitempty"`
	Start    time.Time  `json:"start"` // just before the request was written
	End      time.Time  `json:"end"`   // just after the answer (or the failure) was read
	// Refusal: the node answered with an IdgenError.
	Err *Refusal `json:"err,omitempty"`
	// Transport: no answer (connection refused, reset, timeout); the
	// outcome is unknown, so the call counts neither way.
	Transport string `json:"transport,omitempty"`
}

// OK reports whether the call got IDs.
func (c *Call) OK() bool { return c.Err == nil && c.Transport == "" && len(c.Ranges) > 0 }

func (c *Call) String() string {
	s := fmt.Sprintf("%s->%s#%d %s %s", c.Caller, c.Node, c.Inc, c.Biz, c.Channel)
	if c.SubKey != "" {
		s += "/" + c.SubKey
	}
	if c.Served != "" && c.Served != c.Channel {
		s += " served=" + c.Served
	}
	if c.Fallback {
		s += " fallback"
	}
	return s + fmt.Sprintf(" sent %s answered %s", ts(c.Start), ts(c.End))
}

func ts(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

// Layout is the snowflake layout the IDs are decoded with.
type Layout struct {
	EpochMs  int64
	IDCBits  int
	NodeBits int
}

// DefaultLayout is the documented default: epoch 2020-01-01T00:00:00Z,
// idc_bits 2, node_bits 8.
var DefaultLayout = Layout{EpochMs: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), IDCBits: 2, NodeBits: 8}

// Decode splits a snowflake ID into Unix milliseconds, worker and sequence.
func (l Layout) Decode(id int64) (ms int64, worker int, seq int) {
	return id>>22 + l.EpochMs, int(id>>12) & 0x3ff, int(id & 0xfff)
}

// Options for Check.
type Options struct {
	Layout Layout
	// From, To bound the window for the longest gaps (zero: first start,
	// last end of the history).
	From, To time.Time
	// MaxReport caps the detailed findings kept per kind (default 20).
	MaxReport int
}

// Finding is one violation, with the calls involved.
type Finding struct {
	Kind   string
	Detail string
}

// Gap is the longest stretch without a successful call for one key.
type Gap struct {
	Key      string
	Len      time.Duration
	From, To time.Time
}

// Report is what Check found.
type Report struct {
	Calls, OK, Refused, Transport int
	IDs                           int64
	ByChannel                     map[string]int64 // IDs by requested channel (fallback counted as SNOWFLAKE)
	Fallback                      int64            // IDs served by a fallback
	Duplicates                    int              // overlapping range pairs (biz space and ORDERED)
	Order                         int              // ORDERED order violations
	WorkerMs                      int              // (worker, ms) issued by two incarnations
	BadRefusals                   int              // refusals that are not typed, retryable, with retry_after_ms where due
	ErrorsByCode                  map[string]int
	Findings                      []Finding // up to MaxReport per kind
	// Pairs are the two calls of every duplicate and order violation
	// (not of malformed ranges or (worker, ms) repeats), for a caller
	// that explains violations by what happened between the calls (the
	// simulator's documented limits).
	Pairs []Pair
	Gaps  []Gap // cluster, channel/..., node/...
	nfind map[string]int
	max   int
}

// Pair is one violation between two answered calls: a duplicate (in any
// order) or an order violation (Earlier was answered first).
type Pair struct {
	Kind           string // "duplicate" or "order"
	Space          string // "ordered biz/sub", "biz NAME (...)"
	Earlier, Later Call
}

// pair records a violation between calls a and b, the one answered first
// as Earlier.
func (r *Report) pair(kind, space string, a, b *Call) {
	if b.End.Before(a.End) {
		a, b = b, a
	}
	r.Pairs = append(r.Pairs, Pair{Kind: kind, Space: space, Earlier: *a, Later: *b})
}

// Failed reports whether any safety property was violated.
func (r *Report) Failed() bool {
	return r.Duplicates+r.Order+r.WorkerMs+r.BadRefusals > 0
}

// Gap returns the gap recorded for key (zero if none).
func (r *Report) Gap(key string) Gap {
	for _, g := range r.Gaps {
		if g.Key == key {
			return g
		}
	}
	return Gap{Key: key}
}

func (r *Report) add(kind, format string, a ...any) {
	r.nfind[kind]++
	if r.nfind[kind] <= r.max {
		r.Findings = append(r.Findings, Finding{Kind: kind, Detail: fmt.Sprintf(format, a...)})
	}
}

// CodeNames are the IDL's ErrorCode names.
var CodeNames = map[int32]string{1: "INVALID_ARGUMENT", 2: "UNKNOWN_BIZ", 3: "CLOCK_ROLLBACK", 4: "WORKER_UNAVAILABLE",
	5: "SEGMENT_UNAVAILABLE", 6: "EXHAUSTED", 7: "RATE_LIMITED", 8: "UNAUTHENTICATED", 9: "PERMISSION_DENIED",
	10: "INTERNAL", 11: "CLOCK_JUMP"}

// retryableCodes are the codes a fault may legitimately cause; the value
// says whether retry_after_ms must be set (the README: CLOCK_ROLLBACK says
// how far back, CLOCK_JUMP how long until the next mark write).
var retryableCodes = map[int32]bool{3: true, 4: false, 5: false, 7: false, 11: true}

// CodeName returns the name of an error code.
func CodeName(c int32) string {
	if n, ok := CodeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("CODE_%d", c)
}

// Check runs every check over calls.
func Check(calls []Call, o Options) *Report {
	if o.MaxReport == 0 {
		o.MaxReport = 20
	}
	r := &Report{ByChannel: map[string]int64{}, ErrorsByCode: map[string]int{}, nfind: map[string]int{}, max: o.MaxReport}
	r.Calls = len(calls)
	for i := range calls {
		c := &calls[i]
		switch {
		case c.Transport != "":
			r.Transport++
		case c.Err != nil:
			r.Refused++
			r.ErrorsByCode[CodeName(c.Err.Code)]++
			r.checkRefusal(c)
		case len(c.Ranges) > 0:
			r.OK++
			for _, rg := range c.Ranges {
				n := rg[1] - rg[0] + 1
				r.IDs += n
				r.ByChannel[c.Channel] += n
				if c.Fallback {
					r.Fallback += n
				}
				if rg[1] < rg[0] || rg[0] <= 0 {
					r.Duplicates++ // a malformed range can hide anything: count it as a failure
					r.add("bad-range", "range %d..%d is empty or not positive: %s", rg[0], rg[1], c)
				}
			}
		}
	}
	r.uniqueness(calls)
	r.ordered(calls)
	r.workerMs(calls, o.Layout)
	r.gaps(calls, o.From, o.To)
	return r
}

func (r *Report) checkRefusal(c *Call) {
	e := c.Err
	must, ok := retryableCodes[e.Code]
	switch {
	case !ok:
		r.BadRefusals++
		r.add("refusal", "%s is not a retryable condition: %s (%q)", CodeName(e.Code), c, e.Message)
	case !e.Retryable:
		r.BadRefusals++
		r.add("refusal", "%s without retryable=true: %s (%q)", CodeName(e.Code), c, e.Message)
	case must && e.RetryAfterMs <= 0:
		r.BadRefusals++
		r.add("refusal", "%s without retry_after_ms: %s (%q)", CodeName(e.Code), c, e.Message)
	}
}

// interval is one range of one call.
type interval struct {
	first, last int64
	call        int
}

// sweep reports every range that overlaps an earlier one (sorted by first):
// an interval sweep, so overlapping ranges count, not only equal IDs.
func (r *Report) sweep(space string, calls []Call, ivs []interval) {
	sort.Slice(ivs, func(i, j int) bool {
		if ivs[i].first != ivs[j].first {
			return ivs[i].first < ivs[j].first
		}
		return ivs[i].last < ivs[j].last
	})
	cur := -1
	for i, iv := range ivs {
		if cur >= 0 && iv.first <= ivs[cur].last {
			p := ivs[cur]
			lo, hi := iv.first, min(iv.last, p.last)
			r.Duplicates++
			r.pair("duplicate", space, &calls[p.call], &calls[iv.call])
			r.add("duplicate", "%s: %d..%d (%d IDs) issued twice:\n    A %d..%d by %s\n    B %d..%d by %s",
				space, lo, hi, hi-lo+1, p.first, p.last, &calls[p.call], iv.first, iv.last, &calls[iv.call])
		}
		if cur < 0 || iv.last > ivs[cur].last {
			cur = i
		}
	}
}

// uniqueness: one space per business for SNOWFLAKE, UNORDERED and fallback
// IDs together; one per (business, sub key) for ORDERED.
func (r *Report) uniqueness(calls []Call) {
	spaces := map[string][]interval{}
	for i := range calls {
		c := &calls[i]
		if !c.OK() {
			continue
		}
		key := "biz " + c.Biz + " (snowflake+unordered+fallback)"
		if c.Channel == Ordered || c.Served == Ordered {
			key = "ordered " + c.Biz + "/" + c.SubKey
		}
		for _, rg := range c.Ranges {
			spaces[key] = append(spaces[key], interval{rg[0], rg[1], i})
		}
	}
	keys := make([]string, 0, len(spaces))
	for k := range spaces {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r.sweep(k, calls, spaces[k])
	}
}

// ordered: strictly increasing per caller, and in real time across callers:
// a call that started after another one ended gets larger numbers.
func (r *Report) ordered(calls []Call) {
	type oc struct {
		lo, hi int64
		call   int
	}
	groups := map[string][]oc{}
	for i := range calls {
		c := &calls[i]
		if !c.OK() || c.Channel != Ordered {
			continue
		}
		lo, hi := c.Ranges[0][0], c.Ranges[0][1]
		for j := 1; j < len(c.Ranges); j++ {
			if c.Ranges[j][0] <= c.Ranges[j-1][1] {
				r.Order++
				r.add("order", "ranges of one answer not increasing: %v: %s", c.Ranges, c)
			}
			lo, hi = min(lo, c.Ranges[j][0]), max(hi, c.Ranges[j][1])
		}
		groups[c.Biz+"/"+c.SubKey] = append(groups[c.Biz+"/"+c.SubKey], oc{lo, hi, i})
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g := groups[k]
		// Per caller, in the order the caller made its calls.
		byStart := append([]oc(nil), g...)
		sort.SliceStable(byStart, func(i, j int) bool { return calls[byStart[i].call].Start.Before(calls[byStart[j].call].Start) })
		last := map[string]oc{}
		for _, x := range byStart {
			c := &calls[x.call]
			if p, ok := last[c.Caller]; ok && x.lo <= p.hi {
				r.Order++
				r.pair("order", "ordered "+k, &calls[p.call], c)
				r.add("order", "ORDERED %s: caller %s got %d..%d after %d..%d:\n    before %s\n    after  %s",
					k, c.Caller, x.lo, x.hi, p.lo, p.hi, &calls[p.call], c)
			}
			last[c.Caller] = x
		}
		// Real time: walk calls by start; every call that ended before
		// this one started must have smaller numbers.
		byEnd := append([]oc(nil), g...)
		sort.SliceStable(byEnd, func(i, j int) bool { return calls[byEnd[i].call].End.Before(calls[byEnd[j].call].End) })
		p, best := 0, -1
		for _, x := range byStart {
			c := &calls[x.call]
			for p < len(byEnd) && calls[byEnd[p].call].End.Before(c.Start) {
				if best < 0 || byEnd[p].hi > byEnd[best].hi {
					best = p
				}
				p++
			}
			if best >= 0 && x.lo <= byEnd[best].hi && calls[byEnd[best].call].Caller != c.Caller {
				b := byEnd[best]
				r.Order++
				r.pair("order", "ordered "+k, &calls[b.call], c)
				r.add("order", "ORDERED %s: real-time order broken: %d..%d started after %d..%d had been answered:\n    earlier %s\n    later   %s",
					k, x.lo, x.hi, b.lo, b.hi, &calls[b.call], c)
			}
		}
	}
}

// workerMs: no (worker, millisecond) of a snowflake ID is issued by two node
// incarnations, and a range stays inside one (worker, millisecond).
func (r *Report) workerMs(calls []Call, l Layout) {
	type owner struct {
		who  string
		call int
	}
	seen := map[int64]owner{}
	for i := range calls {
		c := &calls[i]
		if !c.OK() || c.Fallback || c.Served != Snowflake || c.Inc < 0 {
			continue
		}
		who := fmt.Sprintf("%s#%d", c.Node, c.Inc)
		for _, rg := range c.Ranges {
			ms, w, _ := l.Decode(rg[0])
			ms2, w2, _ := l.Decode(rg[1])
			if ms != ms2 || w != w2 {
				r.WorkerMs++
				r.add("worker-ms", "snowflake range %d..%d spans (worker %d, ms %d)..(worker %d, ms %d): %s", rg[0], rg[1], w, ms, w2, ms2, c)
				continue
			}
			key := int64(w)<<44 | ms
			if o, ok := seen[key]; ok && o.who != who {
				r.WorkerMs++
				r.add("worker-ms", "worker %d, ms %d (%s) issued by %s and %s:\n    %s\n    %s", w, ms,
					time.UnixMilli(ms).UTC().Format("15:04:05.000"), o.who, who, &calls[o.call], c)
				continue
			}
			seen[key] = owner{who, i}
		}
	}
}

// gaps: the longest stretch without a successful call (by answer time), for
// the cluster, per requested channel (with and without fallback) and per node.
func (r *Report) gaps(calls []Call, from, to time.Time) {
	ends := map[string][]time.Time{}
	for i := range calls {
		c := &calls[i]
		if from.IsZero() || c.Start.Before(from) {
			from = c.Start
		}
		if to.IsZero() || c.End.After(to) {
			to = c.End
		}
		if !c.OK() {
			continue
		}
		ends["cluster"] = append(ends["cluster"], c.End)
		ends["channel/"+c.Channel] = append(ends["channel/"+c.Channel], c.End)
		if c.Channel == Snowflake && !c.Fallback {
			ends["channel/SNOWFLAKE-no-fallback"] = append(ends["channel/SNOWFLAKE-no-fallback"], c.End)
		}
		ends["node/"+c.Node] = append(ends["node/"+c.Node], c.End)
	}
	for _, k := range []string{"cluster", "channel/" + Snowflake, "channel/SNOWFLAKE-no-fallback", "channel/" + Unordered, "channel/" + Ordered} {
		if _, ok := ends[k]; !ok && len(calls) > 0 {
			ends[k] = nil
		}
	}
	keys := make([]string, 0, len(ends))
	for k := range ends {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, rj := strings.Count(keys[i], "node/"), strings.Count(keys[j], "node/")
		if ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		r.Gaps = append(r.Gaps, LongestGap(k, ends[k], from, to))
	}
}

// LongestGap returns the longest stretch within [from, to] without one of
// the times ts (answer times; sorted in place), from and to bounding it:
// with no time at all the whole window is the gap.
func LongestGap(key string, ts []time.Time, from, to time.Time) Gap {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	g := Gap{Key: key}
	prev := from
	for _, t := range append(ts, to) {
		if d := t.Sub(prev); d > g.Len {
			g.Len, g.From, g.To = d, prev, t
		}
		if t.After(prev) {
			prev = t
		}
	}
	return g
}

// Summary is the report on one line.
func (r *Report) Summary() string {
	codes := make([]string, 0, len(r.ErrorsByCode))
	for k, v := range r.ErrorsByCode {
		codes = append(codes, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(codes)
	return fmt.Sprintf("calls=%d ids=%d (fallback %d) dup=%d order=%d worker_ms=%d bad_refusals=%d refused={%s} no_answer=%d gap: cluster %s, SF %s (no fallback %s), UN %s, ORD %s",
		r.Calls, r.IDs, r.Fallback, r.Duplicates, r.Order, r.WorkerMs, r.BadRefusals, strings.Join(codes, " "), r.Transport,
		ms(r.Gap("cluster").Len), ms(r.Gap("channel/SNOWFLAKE").Len), ms(r.Gap("channel/SNOWFLAKE-no-fallback").Len),
		ms(r.Gap("channel/UNORDERED").Len), ms(r.Gap("channel/ORDERED").Len))
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// Details returns the findings, one block each.
func (r *Report) Details() string {
	var b strings.Builder
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  [%s] %s\n", f.Kind, f.Detail)
	}
	for k, n := range r.nfind {
		if n > r.max {
			fmt.Fprintf(&b, "  [%s] ... and %d more\n", k, n-r.max)
		}
	}
	return b.String()
}
