package ordered

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/segment"
)

// shard is one term of one owned shard: the keys loaded in this term and
// the persist loop that merges every pending change of the shard into one
// store operation (group commit). A term never outlives its grant: a new
// grant is a new shard value with an empty key map.
type shard struct {
	idx   int
	grant Grant
	// serverChanges is the gate's count of MySQL server changes
	// (segment.Gate.ServerChanges) when the term was granted (Acquire): a
	// term whose count moved has lived across a server change, and its
	// exact write-back is refused (Allocator.writeBack).
	serverChanges uint64

	mu   sync.Mutex
	keys map[Key]*keyState
	// reqs are the waiters with a gapless request id, until answered:
	// a retry of one of them joins it (see take).
	reqs     map[RequestKey]*waiter
	loadQ    []*keyState
	dirty    map[*keyState]struct{}
	rounds   int   // persists in flight
	closed   bool  // no new allocation (hand-off or abort)
	abortErr error // set when the term ended without a hand-off
	inflight sync.WaitGroup

	wake     chan struct{} // cap 1
	stop     chan struct{} // closed: the loop exits once nothing is queued
	stopOnce sync.Once
	done     chan struct{} // closed by the loop on exit
}

// keyState is one key's counters in this term.
//
//	served  the highest number allocated (answered or about to be)
//	durable the number the store holds for the key (as far as this term
//	        wrote or loaded it): every answer is <= durable
//	want    the number the next persist writes (>= durable when dirty)
//	gen     the gate token (segment.Gate) under which durable was last
//	        written or read: after the gate closes (the MySQL server
//	        changed) durable describes the old server, not the new one
type keyState struct {
	key      Key
	startNum int64
	loaded   bool
	loadErr  error
	loadWait []chan struct{}

	served, durable, want int64
	pending               int64 // the highest Num of the persists in flight
	gen                   uint64
	waiters               []*waiter
	lastUse               time.Time

	// Traffic estimate for cached reservations.
	winStart time.Time
	winCount int64
	rate     float64 // numbers per second
}

// waiter is a request waiting for a persist.
type waiter struct {
	need   int64    // answered once durable >= need
	req    *Request // gapless request id: answered once stored
	round  *round   // the persist in flight that covers it (nil: none)
	stored bool
	ch     chan waitResult // cap 1
	// joined are retries of req that arrived while this waiter was
	// queued: they get its answer (settleLocked).
	joined []joiner
}

// joiner is a retry waiting for an earlier attempt of its request id.
type joiner struct {
	ch       chan waitResult // cap 1
	mismatch bool            // the retry's sub key or count differs from the attempt's
}

type waitResult struct {
	r        segment.Range
	replayed bool
	err      error
	// gen is, for an answer (not replayed), the gate token under which
	// the waiter's numbers were made durable (keyState.gen).
	gen uint64
}

// taken is what shard.take allocated.
type taken struct {
	r        segment.Range
	replayed bool // a stored request id's first answer: nothing allocated
	// durable: r is at or below a number this term persisted under its
	// epoch, through gate token gen (the persist the request waited for,
	// or a gapless reservation already durable). Such numbers may be
	// answered after the term ended (Allocator.answerable).
	durable bool
	gen     uint64
}

func newShard(g Grant) *shard {
	return &shard{idx: g.Shard, grant: g, keys: map[Key]*keyState{}, reqs: map[RequestKey]*waiter{}, dirty: map[*keyState]struct{}{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (sh *shard) signal() {
	select {
	case sh.wake <- struct{}{}:
	default:
	}
}

// queuedLocked wakes the persist loop for a change just queued in
// sh.dirty, unless the loop could not launch it now: while MaxInFlight
// persists of the shard run, launch starts nothing, and the end of each
// persist wakes the loop anyway (persistRound signals after it counted
// itself out, under sh.mu), which then launches what was queued. So under
// load, when most requests arrive while a persist is in flight, a request
// costs no wake-up of the loop (a goroutine hand-off each, which on a
// hot gapless key was one per answer). Called with sh.mu held: the
// count read here and persistRound's decrement are ordered by it.
func (sh *shard) queuedLocked(a *Allocator) {
	if sh.rounds < a.cfg.MaxInFlight {
		sh.signal()
	}
}

func (sh *shard) keyCount() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.keys)
}

func (sh *shard) closedErr(a *Allocator) error {
	if sh.abortErr != nil {
		return sh.abortErr
	}
	return &UnavailableError{Shard: sh.idx, NotOwner: true, Owner: a.cfg.Coordinator.Owner(sh.idx),
		Reason: "the shard is being handed off", RetryAfter: 50 * time.Millisecond}
}

// take allocates n numbers of key and waits until they may be answered
// (loaded, and durable as the mode requires). now is a recent reading of
// Config.Clock (the caller's lease check's), for the key's bookkeeping;
// take reads the clock again after it waited for the key's load. On
// success (not replayed) the caller holds sh.inflight and must call Done
// after its answer check.
func (sh *shard) take(ctx context.Context, a *Allocator, key Key, req segment.OrderedRequest, mode segment.OrderedMode, now time.Time) (taken, error) {
	n := req.Count
	for {
		sh.mu.Lock()
		if sh.closed {
			err := sh.closedErr(a)
			sh.mu.Unlock()
			return taken{}, err
		}
		if req.RequestID != "" {
			if first := sh.reqs[requestKeyOf(req)]; first != nil {
				r, replayed, err := sh.join(ctx, first, key, n)
				return taken{r: r, replayed: replayed}, err
			}
		}
		ks := sh.keyLocked(a, key, req.StartNum, now)
		ks.lastUse = now
		if !ks.loaded {
			ch := make(chan struct{})
			ks.loadWait = append(ks.loadWait, ch)
			sh.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return taken{}, &UnavailableError{Shard: sh.idx, Reason: "loading the key from the store", Err: ctx.Err()}
			}
			sh.mu.Lock()
			err := ks.loadErr
			sh.mu.Unlock()
			if err != nil {
				return taken{}, err
			}
			now = a.cfg.Clock.Now() // after the wait
			continue
		}
		if ks.served > math.MaxInt64-n {
			sh.mu.Unlock()
			return taken{}, fmt.Errorf("%w: biz %q sub key %q is at %d: no room for %d more", segment.ErrExhausted,
				key.Biz, key.SubKey, ks.served, n)
		}
		r := segment.Range{First: ks.served + 1, Last: ks.served + n}
		ks.served += n
		ks.winCount += n
		var w *waiter
		switch mode {
		case segment.OrderedCached:
			size := ks.reservation(now, n, a.cfg)
			if r.Last <= ks.durable && !sh.verifiedLocked(a, ks, r) {
				// The reservation was written on a MySQL server the
				// cluster has left (issue 29 hole a): the new server may
				// have lost it. Persist it again through the gate first.
				a.st.reverified.Add(1)
			}
			if r.Last <= ks.durable {
				// Answered from memory. Reserve the next stretch ahead
				// when half of this one is used, so the hot path never
				// waits for the store.
				if ks.durable-ks.served < size/2 && max(ks.want, ks.pending) <= ks.durable {
					ks.want = addClamp(ks.served, size)
					sh.dirty[ks] = struct{}{}
					sh.queuedLocked(a)
				}
				sh.inflight.Add(1)
				sh.mu.Unlock()
				a.st.fromMemory.Add(1)
				return taken{r: r}, nil
			}
			ks.want = max(ks.want, addClamp(ks.served, size))
			w = &waiter{need: r.Last}
		default: // gapless
			if r.Last <= ks.durable && req.RequestID == "" && !sh.verifiedLocked(a, ks, r) {
				a.st.reverified.Add(1)
			}
			if r.Last <= ks.durable && req.RequestID == "" {
				// Already durable (a reservation left from cached mode),
				// written by this term (a loaded number is below every
				// allocation) through ks.gen, which verifiedLocked found
				// valid.
				t := taken{r: r, durable: true, gen: ks.gen}
				sh.inflight.Add(1)
				sh.mu.Unlock()
				a.st.fromMemory.Add(1)
				return t, nil
			}
			ks.want = max(ks.want, ks.served)
			w = &waiter{need: r.Last}
			if req.RequestID != "" {
				w.req = &Request{Biz: key.Biz, Scope: req.RequestScope, ID: req.RequestID, SubKey: key.SubKey, Count: n, Range: r}
				sh.reqs[requestKeyOf(req)] = w
			}
		}
		w.ch = make(chan waitResult, 1)
		ks.waiters = append(ks.waiters, w)
		sh.dirty[ks] = struct{}{}
		sh.inflight.Add(1)
		sh.queuedLocked(a)
		sh.mu.Unlock()
		select {
		case res := <-w.ch:
			if res.err != nil {
				sh.inflight.Done()
				return taken{}, res.err
			}
			if res.replayed {
				sh.inflight.Done()
				return taken{r: res.r, replayed: true}, nil
			}
			return taken{r: r, durable: true, gen: res.gen}, nil
		case <-ctx.Done():
			// The numbers become a gap (a gapless request id may still
			// be stored: a retry then gets this range back).
			sh.inflight.Done()
			return taken{}, &UnavailableError{Shard: sh.idx, Reason: "waiting for the store", Err: ctx.Err()}
		}
	}
}

// keyLocked returns the key's state in this term, queueing its load when
// it is new. Called with sh.mu held.
func (sh *shard) keyLocked(a *Allocator, key Key, startNum int64, now time.Time) *keyState {
	ks := sh.keys[key]
	if ks == nil {
		sh.evictOne(a)
		ks = &keyState{key: key, startNum: startNum, winStart: now}
		sh.keys[key] = ks
		sh.loadQ = append(sh.loadQ, ks)
		sh.signal()
	}
	return ks
}

// prefetch queues the key's load without allocating, for a request
// refused during the term's lease wait; now is the refusal's clock
// reading.
//
// Why the key must be loaded then: the load puts the stored number into
// Remembered (loadKeys), and the number may have been handed out by the
// previous owner, now paused or gone. If a lossy MySQL failover happens
// during the wait, the barrier's flush raises the row on the new server
// to that number; a key first loaded after the failover would be read
// from the new server, which lost it. Found by the fault scenario
// async-failover-paused, seed 32: once the lease-wait refusal moved before
// the allocation, nothing loaded the key during the wait, and a failover
// 6 s into the old owner's pause lost its last 74 numbers, which the new
// owner then repeated. TestLeaseWaitLoadsAndRemembers shows it.
//
// Why a call of its own and not the normal take: the refusal has to come
// before the allocation (Take: a gapless number allocated and then
// refused is a gap), so a refused request never reaches the take that
// loads keys. What it calls is that take's own step, keyLocked: the same
// queue, the same loadKeys, so there is still one way to load a key, and
// IDGEN_FAULT_ORDERED_FORGET_LOADED (in loadKeys) reopens the hole for
// both. A load answers no request, so it needs no lease; the term's epoch
// was claimed at Acquire, so anything the load leads to writing (a raise
// above a number this node answered before) is fenced as a take's is.
func (sh *shard) prefetch(a *Allocator, key Key, startNum int64, now time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.closed {
		sh.keyLocked(a, key, startNum, now)
	}
}

// join waits for first, a queued attempt of the same request id, and
// returns its answer as a replay. Called with sh.mu held; it releases it.
//
// Why: an attempt whose caller gave up (its context ended) stays queued
// for the next persist, and the allocator's request memory forgets it, so
// the caller's retry reaches the shard as a new request. Allocating again
// would put the id twice into one group commit, which the store refuses
// as malformed, failing every request of the commit (issue 29, hole i).
// The store will hold first's range for the id, so that is the answer;
// nothing is allocated for the retry.
func (sh *shard) join(ctx context.Context, first *waiter, key Key, n int64) (segment.Range, bool, error) {
	j := joiner{ch: make(chan waitResult, 1), mismatch: first.req.SubKey != key.SubKey || first.req.Count != n}
	first.joined = append(first.joined, j)
	sh.mu.Unlock()
	select {
	case res := <-j.ch:
		if res.err != nil {
			return segment.Range{}, false, res.err
		}
		return res.r, true, nil
	case <-ctx.Done():
		return segment.Range{}, false, &UnavailableError{Shard: sh.idx,
			Reason: "an earlier attempt with this request id is waiting for the store", Err: ctx.Err()}
	}
}

// settleLocked answers w with res, and the retries joined to it with the
// same outcome: its range as a replay, or its error. Every answer of a
// waiter goes through here, so sh.reqs never keeps an answered one.
func (sh *shard) settleLocked(w *waiter, res waitResult) {
	w.ch <- res
	if w.req == nil {
		return
	}
	if rk := w.req.key(); sh.reqs[rk] == w {
		delete(sh.reqs, rk)
	}
	for _, j := range w.joined {
		jr := res
		switch {
		case res.err != nil:
		case j.mismatch:
			jr = waitResult{err: segment.RequestMismatch()}
		case !res.replayed:
			jr = waitResult{r: w.req.Range, replayed: true}
		}
		j.ch <- jr
	}
	w.joined = nil
}

// requestKeyOf is the key under which req's request id is kept.
func requestKeyOf(req segment.OrderedRequest) RequestKey {
	return RequestKey{Biz: req.Biz, Scope: req.RequestScope, ID: req.RequestID}
}

// verifiedLocked reports whether numbers up to ks.durable may be answered
// from memory (r is the range about to be answered): the gate is open and
// has not closed since durable was written or read (ks.gen). Otherwise
// the stored number is unverified on the MySQL server the cluster uses
// now: durable drops to the numbers already handed out, so r waits for a
// persist through the gate, which writes the reservation again on the new
// server (and is refused, retryably, while the gate is closed).
//
// Why it is safe: every reservation end is published in
// Allocator.reserved before its persist's gate check passes (persistRound),
// and the gate's token changes when it closes, before the barrier reads
// Remembered. An answer admitted here, with the token unchanged since,
// is therefore covered by what the barrier raises on the new server.
// Called with sh.mu held.
func (sh *shard) verifiedLocked(a *Allocator, ks *keyState, r segment.Range) bool {
	if a.cfg.Gate == nil || faultCachedNoGate() {
		return true
	}
	if tok, err := a.cfg.Gate.Enter(); err == nil && tok == ks.gen {
		return true
	}
	ks.durable = min(ks.durable, r.First-1)
	// A persist in flight may have been said to cover up to the old
	// reservation end (pending): it was written through the old token, so
	// it does not count. Left there, a key that now wants less than the
	// old end (its traffic fell) would never be persisted again and its
	// requests would wait until their deadline (found by the simulator).
	ks.pending = min(ks.pending, ks.durable)
	return false
}

// reservation is how many numbers a cached extension reserves: about
// Config.Window of the key's recent traffic, at least n, at most
// MaxReservation. Called with sh.mu held.
func (ks *keyState) reservation(now time.Time, n int64, cfg Config) int64 {
	if el := now.Sub(ks.winStart); el >= 10*time.Millisecond {
		r := float64(ks.winCount) / el.Seconds()
		if ks.rate > 0 {
			r = (ks.rate + r) / 2
		}
		ks.rate, ks.winStart, ks.winCount = r, now, 0
	}
	size := int64(ks.rate * cfg.Window.Seconds())
	return min(max(size, n, 1), max(cfg.MaxReservation, n))
}

// evictOne drops the least recently used idle key among a few when the
// shard holds its share of Config.MaxKeys. Called with sh.mu held.
func (sh *shard) evictOne(a *Allocator) {
	if len(sh.keys) < a.perShard {
		return
	}
	var victim *keyState
	i := 0
	for _, ks := range sh.keys {
		if i++; i > 8 {
			break
		}
		if !ks.loaded || len(ks.waiters) > 0 || ks.want > ks.durable {
			continue
		}
		if victim == nil || ks.lastUse.Before(victim.lastUse) {
			victim = ks
		}
	}
	if victim != nil {
		delete(sh.keys, victim.key)
		delete(sh.dirty, victim)
	}
}

// round is one persist: in flight until done (set under sh.mu when its
// outcome is applied).
//
// Not a zero-size struct: Go may give every new zero-size value the same
// address, and it did, so w.round == r held for any two rounds: a failed
// persist failed the waiters of every other persist in flight with it
// (MaxInFlight > 1), whose numbers could still commit (holes), and a
// waiter's stale round looked in flight.
type round struct {
	done bool
}

// inFlight reports whether a persist in flight covers w.
func (w *waiter) inFlight() bool { return w.round != nil && !w.round.done }

// run is the shard's persist loop. It loads keys first used, and launches
// persists of every pending change (group commits), up to
// Config.MaxInFlight at once: a persist's transaction holds the shard's
// fence row only until its commit, so the next one runs while the store
// flushes the last (the store merges their flushes), and a hot key is not
// bound to one flush at a time. Persists only raise rows (GREATEST), so
// they may commit in any order.
func (sh *shard) run(a *Allocator) {
	defer close(sh.done)
	stopping := false
	for {
		sh.step(a)
		if !stopping {
			select {
			case <-sh.stop:
				stopping = true
			default:
			}
		}
		if stopping {
			// Exit once nothing is in flight or queued (an aborted term
			// only waits for its persists in flight); each finishing
			// persist wakes the loop.
			if !sh.busy() {
				return
			}
			<-sh.wake
			continue
		}
		select {
		case <-sh.wake:
		case <-sh.stop:
			stopping = true
		}
	}
}

// step loads the keys first used since the last step and launches what
// persists it can.
func (sh *shard) step(a *Allocator) {
	sh.mu.Lock()
	loads := sh.loadQ
	sh.loadQ = nil
	aborted := sh.abortErr != nil
	sh.mu.Unlock()
	if len(loads) > 0 && !aborted {
		sh.loadKeys(a, loads)
	}
	for sh.launch(a) {
	}
}

// busy reports persists in flight, or (unless the term was aborted) work
// queued.
func (sh *shard) busy() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.rounds > 0 || (sh.abortErr == nil && (len(sh.loadQ) > 0 || len(sh.dirty) > 0))
}

// launch starts one persist of the pending changes, if there are any and
// fewer than MaxInFlight are running; it reports whether it started one.
func (sh *shard) launch(a *Allocator) bool {
	sh.mu.Lock()
	if sh.abortErr != nil || sh.rounds >= a.cfg.MaxInFlight {
		sh.mu.Unlock()
		return false
	}
	r := &round{}
	var (
		rows  []Row
		reqs  []Request
		batch []*keyState
		// inRound: the request ids of this round. A store refuses a
		// batch holding one twice, failing all of it; join keeps that
		// from happening, and a second one would wait for a later round
		// (where the store reports it stored: a replay), its key queued
		// again (deferred).
		inRound  map[RequestKey]struct{}
		deferred []*keyState
	)
	for ks := range sh.dirty {
		if !ks.loaded {
			delete(sh.dirty, ks)
			continue
		}
		hasReq := false
		for _, w := range ks.waiters {
			if w.req != nil && !w.stored && !w.inFlight() {
				rk := w.req.key()
				if _, twice := inRound[rk]; twice {
					deferred = append(deferred, ks)
					continue
				}
				if inRound == nil {
					inRound = map[RequestKey]struct{}{}
				}
				inRound[rk] = struct{}{}
				w.round = r
				reqs = append(reqs, *w.req)
				hasReq = true
			}
		}
		if ks.want > max(ks.durable, ks.pending) {
			rows = append(rows, Row{Key: ks.key, Num: ks.want})
			ks.pending = ks.want
			for _, w := range ks.waiters {
				// (Not a deferred request id: this round does not store it.)
				if !w.inFlight() && w.need <= ks.want && (w.req == nil || w.stored) {
					w.round = r
				}
			}
		} else if !hasReq {
			// Nothing to write: what waits is durable already or covered
			// by a persist in flight.
			sh.answerLocked(ks)
			delete(sh.dirty, ks)
			continue
		}
		batch = append(batch, ks)
		delete(sh.dirty, ks)
	}
	for _, ks := range deferred {
		sh.dirty[ks] = struct{}{}
	}
	if len(batch) == 0 {
		sh.mu.Unlock()
		return false
	}
	sh.rounds++
	sh.mu.Unlock()
	go sh.persistRound(a, r, rows, reqs, batch)
	return true
}

// persistRound runs one persist and applies its outcome.
func (sh *shard) persistRound(a *Allocator, r *round, rows []Row, reqs []Request, batch []*keyState) {
	defer sh.signal()
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Timeout)
	gen, err := a.persist(ctx, sh, rows, reqs)
	cancel()
	var dup *DuplicateRequestsError
	switch {
	case errors.As(err, &dup):
		sh.replayDuplicates(a, r, batch, rows, dup)
		return
	case errors.Is(err, ErrFenced):
		a.log.Error("ordered persist fenced: another node owns the shard; dropping it",
			zap.Int("shard", sh.idx), zap.Int64("epoch", sh.grant.Epoch), zap.Error(err))
		a.fenced(sh, "fenced by a newer owner's epoch")
		sh.mu.Lock()
		defer sh.mu.Unlock()
		sh.rounds--
		r.done = true
		// abort left this round's waiters to its outcome: nothing of it
		// was written.
		for _, ks := range sh.keys {
			sh.failUncoveredLocked(ks)
		}
		return
	}
	if errors.Is(err, segment.ErrInvalid) {
		// The store found the batch malformed: a bug of this package
		// (every request was checked on entry), not of any one request.
		// Its requests are refused as retryable, never as the caller's
		// INVALID_ARGUMENT, and the batch is logged for the bug report.
		if ok, suppressed := a.bugLog.Allow("persist-invalid"); ok {
			a.log.Error("ordered group commit refused as malformed by the store (a bug): its requests are refused as retryable",
				zap.Int("shard", sh.idx), zap.Int("rows", len(rows)), zap.Int("request_ids", len(reqs)),
				zap.Int("suppressed", suppressed), zap.Duration("window", a.bugLog.Window()), zap.Error(err))
		}
		err = fmt.Errorf("the store refused the group commit as malformed (a bug; the server logged it): %v", err)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.rounds--
	r.done = true
	byKey := make(map[Key]int64, len(rows))
	for _, row := range rows {
		byKey[row.Key] = row.Num
	}
	for _, ks := range batch {
		num, hasRow := byKey[ks.key]
		if err != nil {
			sh.failLocked(ks, r, num, hasRow, &UnavailableError{Shard: sh.idx, Reason: "persisting to the store failed", Err: err})
			sh.failUncoveredLocked(ks)
			continue
		}
		if hasRow && num > ks.durable {
			ks.durable = num
		}
		if hasRow && num >= ks.durable {
			ks.gen = gen
		}
		for _, w := range ks.waiters {
			if w.round == r && w.req != nil {
				w.stored = true
			}
		}
		sh.answerLocked(ks)
		sh.redirtyLocked(ks)
		sh.failUncoveredLocked(ks)
	}
}

// redirtyLocked queues ks again when something of it still needs a
// persist that is not in flight.
func (sh *shard) redirtyLocked(ks *keyState) {
	covered := max(ks.durable, ks.pending)
	if ks.want > covered {
		sh.dirty[ks] = struct{}{}
		return
	}
	for _, w := range ks.waiters {
		if (w.req != nil && !w.stored && !w.inFlight()) || w.need > covered {
			sh.dirty[ks] = struct{}{}
			return
		}
	}
}

// answerLocked answers the waiters of ks that are durable (and stored).
func (sh *shard) answerLocked(ks *keyState) {
	keep := ks.waiters[:0]
	for _, w := range ks.waiters {
		if w.need <= ks.durable && (w.req == nil || w.stored) {
			sh.settleLocked(w, waitResult{gen: ks.gen})
			continue
		}
		keep = append(keep, w)
	}
	clear(ks.waiters[len(keep):])
	ks.waiters = keep
}

// failLocked fails the waiters of ks that persist r was for; the others
// wait for the next one.
func (sh *shard) failLocked(ks *keyState, r *round, num int64, hasRow bool, err error) {
	keep := ks.waiters[:0]
	var need int64
	for _, w := range ks.waiters {
		if w.round == r {
			sh.settleLocked(w, waitResult{err: err})
			continue
		}
		need = max(need, w.need)
		keep = append(keep, w)
	}
	clear(ks.waiters[len(keep):])
	ks.waiters = keep
	if hasRow && ks.pending == num {
		ks.pending = ks.durable
	}
	if hasRow && ks.want <= num {
		// What failed is asked again only by a request that needs it.
		ks.want = max(ks.durable, need)
	}
	sh.redirtyLocked(ks)
}

// replayDuplicates answers the waiters whose request ids persist r found
// already stored (served before this term) with the stored ranges; their
// own allocations become a gap. Nothing of r was written: its other
// waiters wait for the next persist.
func (sh *shard) replayDuplicates(a *Allocator, r *round, batch []*keyState, rows []Row, dup *DuplicateRequestsError) {
	type scope struct{ biz, scope string }
	byScope := map[scope][]string{}
	for _, rk := range dup.Requests {
		k := scope{rk.Biz, rk.Scope}
		byScope[k] = append(byScope[k], rk.ID)
	}
	stored := map[RequestKey]Request{}
	var lookupErr error
	for k, ids := range byScope {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Timeout)
		m, err := a.cfg.Store.LookupRequests(ctx, k.biz, k.scope, ids)
		cancel()
		if err != nil {
			lookupErr = err
			continue
		}
		for id, q := range m {
			stored[RequestKey{Biz: k.biz, Scope: k.scope, ID: id}] = q
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.rounds--
	r.done = true
	dupSet := map[RequestKey]bool{}
	for _, rk := range dup.Requests {
		dupSet[rk] = true
	}
	byKey := make(map[Key]int64, len(rows))
	for _, row := range rows {
		byKey[row.Key] = row.Num
	}
	for _, ks := range batch {
		if num, ok := byKey[ks.key]; ok && ks.pending == num {
			ks.pending = ks.durable
		}
		keep := ks.waiters[:0]
		for _, w := range ks.waiters {
			if w.round != r {
				keep = append(keep, w)
				continue
			}
			w.round = nil
			if w.req == nil || !dupSet[w.req.key()] {
				keep = append(keep, w)
				continue
			}
			rk := w.req.key()
			s, ok := stored[rk]
			switch {
			case !ok:
				err := lookupErr
				if err == nil {
					err = errors.New("stored request id vanished (cleaned up); retry")
				}
				sh.settleLocked(w, waitResult{err: &UnavailableError{Shard: sh.idx, Reason: "reading a stored request id", Err: err}})
			case s.SubKey != w.req.SubKey || s.Count != w.req.Count:
				sh.settleLocked(w, waitResult{err: segment.RequestMismatch()})
			default:
				sh.settleLocked(w, waitResult{r: s.Range, replayed: true})
			}
		}
		clear(ks.waiters[len(keep):])
		ks.waiters = keep
		sh.dirty[ks] = struct{}{}
		sh.failUncoveredLocked(ks)
	}
}

// loadKeys reads keys first used in this term. A key starts above the
// stored number and above the highest number this node ever answered for
// it (a store that went backwards is raised, never served below).
func (sh *shard) loadKeys(a *Allocator, loads []*keyState) {
	keys := make([]Key, len(loads))
	for i, ks := range loads {
		keys[i] = ks.key
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Timeout)
	got, gen, err := a.load(ctx, sh, keys)
	cancel()
	if errors.Is(err, ErrFenced) {
		a.fenced(sh, "fenced by a newer owner's epoch while loading")
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, ks := range loads {
		if err != nil {
			ks.loadErr = &UnavailableError{Shard: sh.idx, Reason: "loading the key from the store", Err: err}
			if sh.keys[ks.key] == ks {
				delete(sh.keys, ks.key)
			}
		} else {
			stored, ok := got[ks.key]
			if !ok {
				stored = ks.startNum - 1
			}
			base := stored
			if seen := a.seen[sh.idx].get(ks.key); seen > base {
				// The store is behind numbers this node answered: a
				// failover lost them. Serve above them, and write the
				// raise with the first persist.
				a.st.regressions.Add(1)
				a.log.Warn("ordered row behind a number this node answered; raising it",
					zap.String("biz", ks.key.Biz), zap.String("sub_key", ks.key.SubKey),
					zap.Int64("stored", stored), zap.Int64("highest_answered", seen))
				base = seen
				sh.dirty[ks] = struct{}{}
			}
			ks.durable, ks.served, ks.want, ks.gen = stored, base, base, gen
			ks.loaded = true
			if ok && !faultForgetLoaded() {
				// The stored number may have been handed out by the
				// previous owner: the barrier raises it on a new server
				// (Remembered), even if this node never answers the key.
				a.reserved[sh.idx].raise(ks.key, stored)
			}
		}
		for _, ch := range ks.loadWait {
			close(ch)
		}
		ks.loadWait = nil
	}
}

// close stops new allocations for a hand-off; the loop finishes what is
// queued.
func (sh *shard) close() {
	sh.mu.Lock()
	sh.closed = true
	sh.mu.Unlock()
	sh.signal()
}

// writeBack returns the exact counters to write back after the loop has
// drained: every key whose stored number is above its last allocation.
func (sh *shard) writeBack() []Row {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var rows []Row
	for _, ks := range sh.keys {
		if ks.loaded && ks.durable > ks.served {
			rows = append(rows, Row{Key: ks.key, Num: ks.served})
		}
	}
	return rows
}

// abort ends the term without a hand-off: every waiter fails with err,
// except those of a persist in flight, which get its outcome (see
// failUncoveredLocked).
func (sh *shard) abort(err error) {
	sh.mu.Lock()
	sh.closed = true
	if sh.abortErr == nil {
		sh.abortErr = err
	}
	for _, ks := range sh.keys {
		sh.failUncoveredLocked(ks)
		if !ks.loaded {
			ks.loadErr = err
			for _, ch := range ks.loadWait {
				close(ch)
			}
			ks.loadWait = nil
		}
	}
	sh.mu.Unlock()
	sh.stopLoop()
}

// failUncoveredLocked fails, once the term was aborted, the waiters of ks
// that no persist in flight covers: nothing launches a persist for them
// any more. A waiter of a persist in flight waits for its outcome: a
// commit under the term's epoch made its numbers durable, and they are
// answered although the term ended (Allocator.answerable); refused, they
// would be a hole no failed call explains, since the caller's retry
// (the server's ride-out, a forward) gets the next owner's numbers. A
// persist that fails, fenced by the next owner's claim among others,
// fails its waiters. Called with sh.mu held; nothing before the abort.
func (sh *shard) failUncoveredLocked(ks *keyState) {
	if sh.abortErr == nil {
		return
	}
	keep := ks.waiters[:0]
	for _, w := range ks.waiters {
		if w.inFlight() && !faultRefuseAfterLoss() {
			keep = append(keep, w)
			continue
		}
		sh.settleLocked(w, waitResult{err: sh.abortErr})
	}
	clear(ks.waiters[len(keep):])
	ks.waiters = keep
}

// stopLoop makes the persist loop exit once nothing is queued.
func (sh *shard) stopLoop() {
	sh.stopOnce.Do(func() { close(sh.stop) })
	sh.signal()
}

func (sh *shard) aborted() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.abortErr != nil
}
