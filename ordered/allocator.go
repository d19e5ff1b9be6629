package ordered

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/logevery"
	"github.com/idgen/idgen/segment"
)

// Defaults of Config fields left zero.
const (
	DefaultWindow         = 300 * time.Millisecond
	DefaultMaxReservation = 1_000_000
	DefaultMaxKeys        = 100_000
	DefaultMaxRequests    = 100_000
	DefaultRequestTTL     = 10 * time.Minute
	DefaultTimeout        = 2 * time.Second
	DefaultGroupCommits   = 2
	// loadBatch bounds the keys of one Load call.
	loadBatch = 500
)

// Config configures an Allocator.
type Config struct {
	// Store persists the shards' counters. Required.
	Store Store
	// Coordinator is asked for ValidUntil (the node's lease) before every
	// answer and for the owner of shards this node does not own.
	// Required.
	Coordinator Coordinator
	// Self is this node's RPC address, recorded with claims.
	Self string
	// Clock is monotonic time (default SystemClock).
	Clock Clock
	// Wall is the wall clock the lease is checked on too (default
	// WallClock, or Clock when that is not SystemClock: a test's fake
	// clock drives both; see Coordinator.ValidUntilWall).
	Wall Clock
	// Window sizes a cached reservation: about this much of the key's
	// recent traffic (default 300ms), so an owner's crash costs a small,
	// bounded gap whatever the key's rate.
	Window time.Duration
	// MaxReservation caps one cached reservation (default 1,000,000).
	MaxReservation int64
	// MaxKeys bounds the keys kept in memory over all shards (default
	// 100,000; the least recently used idle key is dropped: a gapless key
	// loses nothing, a cached one its unused reservation).
	MaxKeys int
	// MaxRequests, MaxRequestBytes and RequestTTL bound the request ids
	// kept in memory (defaults 100,000, DefaultMaxRequestBytes and 10
	// minutes; the byte bound applies to the answers and to the stored
	// gapless ids each). Gapless request ids are also stored durably;
	// cached ones only here.
	MaxRequests     int
	MaxRequestBytes int
	RequestTTL      time.Duration
	// Timeout bounds one store call (default 2s).
	Timeout time.Duration
	// MaxInFlight bounds the persists of one shard running at once
	// (default 1). More than one is correct (persists only raise rows)
	// but measured slower on MariaDB: concurrent persists of a shard
	// queue on its fence row, and a queued one cannot join the next
	// group commit (BENCHMARKS.md, "ORDERED at memory speed").
	MaxInFlight int
	// GroupCommits bounds the node's group commits in flight (default
	// 2): every shard's pending persist goes into one store transaction
	// with the other shards' (Store.PersistShards), and a second
	// transaction runs while the first one flushes.
	GroupCommits int
	// Gate, when set, holds loads and persists back while the cluster
	// repairs the store after a MySQL failover (package zkguard).
	Gate segment.Gate
	// BeforeWriteBack, when set, runs in a planned hand-off after the
	// shard stopped answering and before its exact counters are written
	// back (fault injection stalls there, to show the epoch refusing a
	// deposed owner's write-back).
	BeforeWriteBack func(shard int)
	// Logger (nil: none).
	Logger *zap.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Store == nil:
		return c, fmt.Errorf("%w: ordered.Config.Store is nil", segment.ErrInvalid)
	case c.Coordinator == nil:
		return c, fmt.Errorf("%w: ordered.Config.Coordinator is nil", segment.ErrInvalid)
	case c.Window < 0, c.MaxReservation < 0, c.MaxKeys < 0, c.MaxRequests < 0, c.MaxRequestBytes < 0, c.RequestTTL < 0, c.Timeout < 0:
		return c, fmt.Errorf("%w: ordered.Config: negative limit", segment.ErrInvalid)
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxReservation == 0 {
		c.MaxReservation = DefaultMaxReservation
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = DefaultMaxRequests
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.RequestTTL == 0 {
		c.RequestTTL = DefaultRequestTTL
	}
	if c.Wall == nil {
		c.Wall = DefaultWall(c.Clock)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 1
	}
	if c.GroupCommits <= 0 {
		c.GroupCommits = DefaultGroupCommits
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// Allocator serves ORDERED requests for the shards this node owns. It is
// the Coordinator's Handler. Safe for concurrent use.
type Allocator struct {
	cfg    Config
	log    *zap.Logger
	shards [segment.OrderedShards]atomic.Pointer[shard]
	// changes holds, per shard, the channel closed at the shard's next
	// change of term here (ShardChanged); nil until someone waits.
	changes  [segment.OrderedShards]atomic.Pointer[chan struct{}]
	requests *requestMemory
	seen     [segment.OrderedShards]seenMap // highest number answered per key, across terms
	// reserved is the highest number persisted per key, across terms:
	// the end of every reservation (cached) or group commit (gapless)
	// this node wrote. The barrier raises it on a new MySQL server
	// (Remembered): every number this node may hand out without another
	// store call is at or below it (issue 29 hole a).
	reserved [segment.OrderedShards]seenMap
	// stored are the gapless request ids this node stored, published
	// like reserved before the persist's gate check: the barrier stores
	// them again on a new MySQL server (RememberedRequests).
	stored *storedRequests
	// commits merges the shards' persists into group commits.
	commits  *committer
	perShard int               // MaxKeys / shards
	bugLog   *logevery.Limiter // bounds the log of a failure every persist could repeat
	// owner is what this process records with its claims: Self and a
	// random tag of the process (ownerTag).
	owner string
	// systemClocks: Config.Clock is SystemClock and Config.Wall is
	// WallClock, so one time.Now reads both (wallAt).
	systemClocks bool

	st stats
}

// stats are the allocator's counters.
type stats struct {
	takes, answered, fromMemory, persists, persistedRows, persistFailures atomic.Uint64
	loads, fenced, leaseRefusals, notOwner, replays, regressions          atomic.Uint64
	acquired, released, lost, writeBacks                                  atomic.Uint64
	reverified, uncleanHandOffs, answeredAfterLoss                        atomic.Uint64
	persistNanos                                                          atomic.Uint64
	persistDurations                                                      durations // the same, by bucket
}

// Stats is a snapshot of the allocator's counters, for metrics.
type Stats struct {
	Takes, Answered, FromMemory              uint64
	Persists, PersistedRows, PersistFailures uint64
	PersistSeconds                           float64
	Loads, Fenced, LeaseRefusals, NotOwner   uint64
	Replays, Regressions                     uint64
	Acquired, Released, Lost, WriteBacks     uint64
	// Reverified counts answers from memory held back because the gate
	// closed since their reservation was written (a MySQL server change):
	// the reservation is persisted again on the new server first.
	Reverified uint64
	// UncleanHandOffs counts planned hand-offs whose exact write-back
	// never succeeded (ErrUncleanHandOff).
	UncleanHandOffs uint64
	// AnsweredAfterLoss counts answers of numbers persisted under a term
	// that ended before the answer (lost, handed off, lease run out):
	// refused, each would have been a gapless hole (Allocator.answerable).
	AnsweredAfterLoss uint64
	// RequestsDropped and StoredRequestsDropped count request ids
	// dropped from memory by MaxRequests or MaxRequestBytes before
	// RequestTTL: answers (a cached-mode retry of one is a new request)
	// and stored gapless ids (a barrier cannot store them again).
	RequestsDropped, StoredRequestsDropped uint64
	ShardsOwned, ShardsServing, Keys       int

	// PersistDurations is the latency of every persist (group commit)
	// attempt, as PersistSeconds sums it: its Count is Persists +
	// PersistFailures, its Sum PersistSeconds.
	PersistDurations Histogram
}

// New returns an allocator owning nothing; the Coordinator hands it shards.
func New(cfg Config) (*Allocator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Allocator{cfg: cfg, log: cfg.Logger, requests: newRequestMemory(cfg.MaxRequests, cfg.MaxRequestBytes, cfg.RequestTTL),
		stored:   newStoredRequests(cfg.MaxRequests, cfg.MaxRequestBytes, cfg.RequestTTL),
		perShard: max(1, cfg.MaxKeys/segment.OrderedShards), bugLog: logevery.New(time.Minute, nil),
		owner: cfg.Self + " " + ownerTag(), commits: newCommitter(cfg.Store, cfg.GroupCommits, cfg.Timeout)}
	_, sysMono := cfg.Clock.(SystemClock)
	_, sysWall := cfg.Wall.(WallClock)
	a.systemClocks = sysMono && sysWall
	for i := range a.seen {
		a.seen[i].m = map[Key]int64{}
		a.seen[i].max = a.perShard
		a.reserved[i].m = map[Key]int64{}
		a.reserved[i].max = a.perShard
	}
	return a, nil
}

// Take hands out n (1..segment.MaxStep) consecutive numbers for (biz,
// subKey), strictly above every number of the key answered before this call
// by any node. With a request id a retry (the same id and scope, sub key
// and count) gets the first answer back (in gapless mode even from a later
// owner; in cached mode while this owner remembers it). Ids of different
// scopes (callers) never meet.
//
// Errors: segment.ErrInvalid, segment.ErrRequestMismatch, segment.ErrExhausted,
// and *UnavailableError (retryable; NotOwner when another node owns the
// shard).
func (a *Allocator) Take(ctx context.Context, biz segment.Biz, subKey string, n int64, rid segment.RequestID) (segment.Range, error) {
	req, err := segment.NormalizeOrderedRequest(segment.OrderedRequest{
		Biz: biz.Name, SubKey: subKey, Count: n, StartNum: biz.StartNum, RequestID: rid.ID, RequestScope: rid.Scope,
	})
	if err != nil {
		return segment.Range{}, err
	}
	if !utf8.ValidString(subKey) {
		return segment.Range{}, fmt.Errorf("%w: sub_key is not valid UTF-8 (its shard would differ from the Java service's)", segment.ErrInvalid)
	}
	a.st.takes.Add(1)
	idx := segment.Shard(subKey)
	sh := a.shards[idx].Load()
	if sh == nil {
		a.st.notOwner.Add(1)
		return segment.Range{}, &UnavailableError{Shard: idx, NotOwner: true, Owner: a.cfg.Coordinator.Owner(idx),
			Reason: "this node does not own the shard", RetryAfter: 50 * time.Millisecond}
	}
	// Refuse before allocating what would be refused after: a number
	// allocated (and, gapless, persisted) and then refused is a gap. A new
	// owner's lease wait would otherwise cost a gapless key one number per
	// request that arrives during it. The check after the allocation stays:
	// it is what makes a pause in between safe.
	key := Key{Biz: biz.Name, SubKey: subKey}
	now, err := a.mayAnswer(sh)
	if err != nil {
		if now.Before(sh.grant.NotBefore) {
			sh.prefetch(a, key, req.StartNum, now) // refused in the lease wait: still load the key
		}
		return segment.Range{}, err
	}
	var entry *requestEntry
	if rid.ID != "" {
		rk := requestKeyOf(req)
		for {
			var first bool
			entry, first = a.requests.begin(rk, subKey, n, now)
			if first {
				break
			}
			r, ok, err := entry.wait(ctx)
			if !ok {
				now = a.cfg.Clock.Now() // after the wait
				continue                // the first attempt failed: this one tries afresh
			}
			if err != nil {
				return segment.Range{}, err
			}
			if entry.subKey != subKey || entry.count != n {
				return segment.Range{}, segment.RequestMismatch()
			}
			a.st.replays.Add(1)
			return r, nil
		}
	}
	t, err := sh.take(ctx, a, key, req, biz.OrderedMode, now)
	r, replayed := t.r, t.replayed
	if err == nil && !replayed {
		err = a.answerable(sh, t)
		if err == nil {
			a.seen[idx].raise(key, r.Last)
		}
		sh.inflight.Done()
	}
	if entry != nil {
		a.requests.finish(entry, r, err)
	}
	if err != nil {
		return segment.Range{}, err
	}
	if replayed {
		a.st.replays.Add(1)
		return r, nil
	}
	a.st.answered.Add(1)
	return r, nil
}

// ShardChanged returns a channel that is closed at the next change of
// subKey's shard on this node: a term installed (Acquire) or ended (Lost,
// a fence, the end of a hand-off). A caller that takes the channel before
// it looks at the shard (Take, Holds) misses no change after that look,
// so a refusal can be waited out until the change instead of retried on
// a timer: the server's ride-out of a shard in transition answers as soon
// as the shard serves here (issue 31: a new node's first ORDERED answer
// came up to a whole back-off step, 80 ms, after its shard was claimed).
func (a *Allocator) ShardChanged(subKey string) <-chan struct{} {
	p := &a.changes[segment.Shard(subKey)]
	for {
		if ch := p.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		if p.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// changed wakes the waiters of shard idx (ShardChanged); called after the
// shard's term changed, so a waiter woken finds the new state.
func (a *Allocator) changed(idx int) {
	if ch := a.changes[idx].Swap(nil); ch != nil {
		close(*ch)
	}
}

// endTerm removes sh as its shard's term, if it still is, and wakes the
// shard's waiters.
func (a *Allocator) endTerm(sh *shard) {
	if a.shards[sh.idx].CompareAndSwap(sh, nil) {
		a.changed(sh.idx)
	}
}

// Holds reports whether this node holds subKey's shard now (it may still
// be in its lease wait or handing it off): a lock-free look, so that the
// server can route a request to the shard's owner before applying its
// policy without taking the coordinator's lock on every request.
func (a *Allocator) Holds(subKey string) bool {
	return a.shards[segment.Shard(subKey)].Load() != nil
}

// mayAnswer is checked after the numbers are allocated and before they
// are answered: the shard is still this node's term, the lease wait is
// over and the lease has not run out. A pause between allocation and this
// check is harmless; a pause after it only delays an answer to a request
// sent before any later owner's answer. It returns the reading of
// Config.Clock it checked: Take's check before the allocation hands it
// on to the allocation's bookkeeping (the key's last use and rate), which
// needs no fresher one, so a cached answer reads the clock twice, once
// per check (BenchmarkTakeCached).
func (a *Allocator) mayAnswer(sh *shard) (time.Time, error) {
	now := a.cfg.Clock.Now()
	switch {
	case a.shards[sh.idx].Load() != sh:
		a.st.leaseRefusals.Add(1)
		return now, &UnavailableError{Shard: sh.idx, NotOwner: true, Owner: a.cfg.Coordinator.Owner(sh.idx),
			Reason: "the shard was handed off while the request was served", RetryAfter: 50 * time.Millisecond}
	case now.Before(sh.grant.NotBefore):
		a.st.leaseRefusals.Add(1)
		return now, &UnavailableError{Shard: sh.idx, Reason: leaseWaitReason(sh.grant), RetryAfter: sh.grant.NotBefore.Sub(now)}
	case !now.Before(a.cfg.Coordinator.ValidUntil()):
		a.st.leaseRefusals.Add(1)
		return now, &UnavailableError{Shard: sh.idx, Reason: "this node's ownership lease could not be renewed (coordinator unreachable, and the store too where it holds leases)",
			RetryAfter: 500 * time.Millisecond}
	case !faultLeaseMonotonicOnly() && !WallBefore(a.wallAt(now), a.cfg.Coordinator.ValidUntilWall()):
		a.st.leaseRefusals.Add(1)
		return now, &UnavailableError{Shard: sh.idx, Reason: "this node's ownership lease ran out on the wall clock (the monotonic clock lost time: a frozen VM?)",
			RetryAfter: 500 * time.Millisecond}
	}
	return now, nil
}

// answerable is the check between an allocation and its answer: mayAnswer,
// except that numbers this term made durable under its epoch (t.durable)
// are answered after the term ended (lost, handed off, its lease run out)
// as long as the barrier's gate has not closed since they were written.
//
// Why (issue 31): refused, such numbers are a hole that no failed call
// explains. The term persisted them and then lost the shard before it
// answered (a ZooKeeper session lost with requests in flight: the fault
// scenario ordered-owner-zk-partition); the caller's retry, the server's
// ride-out or a forward, got the next owner's numbers above them.
//
// Why answering them is safe:
//   - Unique: the persist committed under the term's epoch, so before the
//     next owner's claim raised the epoch (a claim waits for the persists
//     in flight, and a later persist is fenced: Store.Claim), and the next
//     owner loads at least these numbers and answers above them.
//   - In real time: the request was sent before its numbers were
//     allocated, under a lease checked before the allocation (Take), so
//     before any later owner answered; every answer that ended before it
//     was sent is below them, and every answer of a later owner is above.
//   - Across a lossy MySQL failover: the rows and request ids were
//     published (reserved, stored) before the persist's gate check, and
//     the gate's token unchanged since then (Check, which also fails once
//     this node's barrier membership ran out) means no barrier has run
//     without them: either the numbers are on the server the cluster
//     uses, or a barrier this node is counted in raises them. A gate that
//     closed since refuses them, with the gate's error: a failed call, not
//     a passing NotOwner the server would ride out and retry.
//   - Request ids: the range answered is the one stored with the id, which
//     a retry at any owner gets back (a duplicate replayed).
//
// Numbers answered from a cached reservation are not t.durable: they keep
// mayAnswer as it is (a cached gap is allowed; an answer is not).
func (a *Allocator) answerable(sh *shard, t taken) error {
	_, err := a.mayAnswer(sh)
	if err == nil || !t.durable || faultRefuseAfterLoss() {
		return err
	}
	if a.cfg.Gate != nil {
		if gerr := a.cfg.Gate.Check(t.gen); gerr != nil {
			return &UnavailableError{Shard: sh.idx, Reason: "the shard's term ended before the answer, and the ORDERED gate closed since its numbers were persisted (a MySQL server change): not answered",
				RetryAfter: 500 * time.Millisecond, Err: gerr}
		}
	}
	a.st.answeredAfterLoss.Add(1)
	return nil
}

// leaseWaitReason says, for a refusal in g's lease wait, whose lease runs
// until when: "new owner (epoch 8) waits out the lease of 10.0.0.1:8888,
// the previous owner, until 12:00:03.412Z". The caller's retry hint is
// the refusal's RetryAfter.
func leaseWaitReason(g Grant) string {
	from := "the previous owner"
	if g.From != "" {
		from = g.From + ", the previous owner,"
	}
	until := ""
	if !g.NotBeforeWall.IsZero() {
		until = " until " + g.NotBeforeWall.UTC().Format("15:04:05.000Z")
	}
	return fmt.Sprintf("new owner (epoch %d) waits out the lease of %s%s", g.Epoch, from, until)
}

// wallAt is the wall clock's reading at now, a reading of Config.Clock.
// With the system's clocks (the defaults) that is now itself: time.Now
// reads the wall clock and the monotonic clock together, and WallClock is
// that reading without its monotonic part, so a second time.Now would
// only add one more clock read to every answer (measured: clock reads
// were most of a cached answer's CPU time; see BenchmarkTakeCached). A
// frozen VM or a wall-clock step shows in that reading as in a separate
// one. Any other pair of clocks (the simulator's, a test's) is read
// separately.
func (a *Allocator) wallAt(now time.Time) time.Time {
	if a.systemClocks {
		return now
	}
	return a.cfg.Wall.Now()
}

// Acquire implements Handler: it claims g.Epoch in the store (fencing the
// previous owner's persists) and installs an empty term: every key is
// loaded from the store on first use.
func (a *Allocator) Acquire(ctx context.Context, g Grant) error {
	if g.Shard < 0 || g.Shard >= segment.OrderedShards {
		return fmt.Errorf("%w: shard %d", segment.ErrInvalid, g.Shard)
	}
	if old := a.shards[g.Shard].Load(); old != nil {
		// A new term replaces an old one only through Lost or Release;
		// be safe anyway.
		a.drop(old, "replaced by a new term")
	}
	// The gate's count of server changes, read before the claim: a server
	// change at any point after it (even during the claim) makes the
	// term's exact write-back refused (writeBack).
	var changes uint64
	if a.cfg.Gate != nil {
		changes = a.cfg.Gate.ServerChanges()
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	err := a.claim(cctx, g)
	cancel()
	if err != nil {
		return fmt.Errorf("ordered: claiming shard %d epoch %d: %w", g.Shard, g.Epoch, err)
	}
	sh := newShard(g)
	sh.serverChanges = changes
	a.shards[g.Shard].Store(sh)
	a.changed(g.Shard)
	go sh.run(a)
	a.st.acquired.Add(1)
	a.log.Debug("ordered shard acquired", zap.Int("shard", g.Shard), zap.Int64("epoch", g.Epoch),
		zap.Duration("lease_wait", max(0, g.NotBefore.Sub(a.cfg.Clock.Now()))))
	return nil
}

// Release implements Handler: a planned hand-off. New requests are refused
// at once (NotOwner), requests already waiting for a persist finish, and
// the exact counters are written back under the epoch, so the next owner
// continues without a gap.
//
// The write-back goes through the gate (the barrier after a MySQL server
// change). A hand-off during the barrier would be refused its write-back,
// and the next owner could load rows the new server lost (issue 29 hole
// a), so:
//   - while the gate is closed Release changes nothing and returns
//     ErrHandOffDeferred (unless ctx is Leaving: then it waits for the
//     gate, bounded by ctx); the coordinator keeps the shard and tries
//     again later;
//   - a write-back refused after the shard stopped answering is retried
//     until ctx ends: once this node's gate is open again its barrier has
//     raised every row it remembers (Remembered) on the new server;
//   - if it never succeeds, Release returns an error wrapping
//     ErrUncleanHandOff: the coordinator releases the shard with a lease
//     wait, never as clean.
//
// A term that lived across a MySQL server change (the gate closed since
// its grant) gets no exact write-back at all (errServerChangedSinceTerm,
// not retried; ErrUncleanHandOff): a lossy failover may have lost a
// later owner's epoch claim, so the epoch fence on the new server would
// pass this stale owner's write-back, which lowers rows below numbers
// the later owner answered and raised there (simulator seed 1120). A gap,
// never a repeat.
func (a *Allocator) Release(ctx context.Context, idx int) error {
	sh := a.shards[idx].Load()
	if sh == nil {
		return nil
	}
	if err := a.gateReady(ctx); err != nil {
		return err
	}
	sh.close()
	// Requests already allocated finish (their persists run and they are
	// answered while the shard is still ours), then the loop stops.
	drained := make(chan struct{})
	go func() { sh.inflight.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-ctx.Done():
	}
	sh.stopLoop()
	<-sh.done
	rows := sh.writeBack()
	defer a.endTerm(sh)
	if a.cfg.BeforeWriteBack != nil && len(rows) > 0 {
		a.cfg.BeforeWriteBack(idx)
	}
	a.st.released.Add(1)
	if len(rows) == 0 && !sh.aborted() && a.leaseStore() != nil {
		// Nothing to write back, but the store lease to clear: a
		// write-back of no rows clears the shard's nonce, so the next
		// owner serves at once (storelease.go). Best effort: left set, it
		// only makes the next owner wait a lease.
		if err := a.writeBack(ctx, sh, nil); err != nil {
			a.log.Debug("ordered hand-off: clearing the store lease failed; the next owner waits a lease", zap.Int("shard", idx), zap.Error(err))
		}
	}
	if len(rows) == 0 || sh.aborted() {
		a.log.Debug("ordered shard handed off", zap.Int("shard", idx), zap.Int64("epoch", sh.grant.Epoch))
		return nil
	}
	if err := a.writeBackRetry(ctx, sh, rows); err != nil {
		if faultUncleanHandOff() {
			return err // the negative control: reported as a plain failure, released as clean
		}
		a.st.uncleanHandOffs.Add(1)
		msg := "ordered hand-off: the exact counters could not be written back; the shard is released with a lease wait"
		if errors.Is(err, errServerChangedSinceTerm) {
			// An operator should know why: a failover, not a store error.
			// The common prefix stays, for log searches (faults/scenario).
			msg = "ordered hand-off: the exact counters could not be written back: the MySQL server changed (failover) since this term began; the shard is released with a lease wait"
		}
		a.log.Warn(msg,
			zap.Int("shard", idx), zap.Int64("epoch", sh.grant.Epoch), zap.Int("keys", len(rows)), zap.Error(err))
		return fmt.Errorf("%w: shard %d: %w", ErrUncleanHandOff, idx, err)
	}
	a.st.writeBacks.Add(1)
	a.log.Debug("ordered shard handed off", zap.Int("shard", idx), zap.Int64("epoch", sh.grant.Epoch), zap.Int("keys_written_back", len(rows)))
	return nil
}

// gatePoll is how often a hand-off looks at a closed gate again.
const gatePoll = 20 * time.Millisecond

// gateReady returns nil when the gate is open (or there is none). While it
// is closed it returns ErrHandOffDeferred at once, or, when ctx is
// Leaving, waits for it to open until ctx ends.
func (a *Allocator) gateReady(ctx context.Context) error {
	if a.cfg.Gate == nil || faultUncleanHandOff() {
		return nil
	}
	t := time.NewTicker(gatePoll)
	defer t.Stop()
	for {
		_, err := a.cfg.Gate.Enter()
		if err == nil {
			return nil
		}
		if !IsLeaving(ctx) {
			return fmt.Errorf("%w: %w", ErrHandOffDeferred, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (waited for the gate until the hand-off's deadline)", ErrHandOffDeferred, err)
		case <-t.C:
		}
	}
}

// writeBackRetry writes the exact counters back, retrying (every gatePoll,
// until ctx ends) while the store or the gate refuses; a fenced refusal,
// and a term that lived across a server change, are final.
func (a *Allocator) writeBackRetry(ctx context.Context, sh *shard, rows []Row) error {
	t := time.NewTicker(gatePoll)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
		err := a.writeBack(cctx, sh, rows)
		cancel()
		if err == nil || errors.Is(err, ErrFenced) || errors.Is(err, errServerChangedSinceTerm) || faultUncleanHandOff() {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}

// Lost implements Handler: the shard is gone; stop at once, write nothing.
func (a *Allocator) Lost(idx int) {
	if sh := a.shards[idx].Load(); sh != nil {
		a.drop(sh, "ownership lost")
		a.st.lost.Add(1)
	}
}

// fenced drops a shard whose epoch the store refused and tells the
// coordinator, which gives the shard's lease up (or claims it again above
// the store's epoch): a fenced shard must not stay this node's in
// ZooKeeper while nobody serves it.
//
// The coordinator hears first, then the requests waiting on the shard get
// their refusal: a caller that saw the refusal finds the coordinator
// already told. A new term the coordinator grants meanwhile replaces this
// one (Acquire drops it; drop only removes the term it is given).
func (a *Allocator) fenced(sh *shard, why string) {
	a.cfg.Coordinator.Fenced(sh.idx, sh.grant.Epoch)
	a.drop(sh, why)
}

func (a *Allocator) drop(sh *shard, why string) {
	a.endTerm(sh)
	sh.abort(&UnavailableError{Shard: sh.idx, NotOwner: true, Reason: why, RetryAfter: 100 * time.Millisecond})
	a.log.Warn("ordered shard dropped", zap.Int("shard", sh.idx), zap.Int64("epoch", sh.grant.Epoch), zap.String("why", why))
}

// Remembered calls fn for every key this node answered or reserved
// (across terms) with the highest number it may have handed out: the end
// of the key's last reservation (cached) or group commit, or the highest
// number answered when that is above it. It is what the cluster's barrier
// raises in a new MySQL server after a failover (zkguard).
//
// Why the reservation's end and not the highest number answered (issue 29
// hole a): an answer admitted before the gate closed may be counted as
// answered only after the barrier read this; the reservation it came from
// was published here before it could be admitted (persistRound), so the
// barrier never raises a row below a number this node hands out.
func (a *Allocator) Remembered(fn func(biz, subKey string, last int64)) {
	for i := range a.seen {
		top := map[Key]int64{}
		a.seen[i].each(func(k Key, v int64) { top[k] = v })
		if !faultRememberAnswered() {
			a.reserved[i].each(func(k Key, v int64) { top[k] = max(top[k], v) })
		}
		for k, v := range top {
			fn(k.Biz, k.SubKey, v)
		}
	}
}

// Stats returns the counters.
func (a *Allocator) Stats() Stats {
	s := Stats{
		Takes: a.st.takes.Load(), Answered: a.st.answered.Load(), FromMemory: a.st.fromMemory.Load(),
		Persists: a.st.persists.Load(), PersistedRows: a.st.persistedRows.Load(), PersistFailures: a.st.persistFailures.Load(),
		PersistSeconds: float64(a.st.persistNanos.Load()) / 1e9,
		Loads:          a.st.loads.Load(), Fenced: a.st.fenced.Load(), LeaseRefusals: a.st.leaseRefusals.Load(),
		NotOwner: a.st.notOwner.Load(), Replays: a.st.replays.Load(), Regressions: a.st.regressions.Load(),
		Acquired: a.st.acquired.Load(), Released: a.st.released.Load(), Lost: a.st.lost.Load(), WriteBacks: a.st.writeBacks.Load(),
		Reverified: a.st.reverified.Load(), UncleanHandOffs: a.st.uncleanHandOffs.Load(), AnsweredAfterLoss: a.st.answeredAfterLoss.Load(),
		RequestsDropped: a.requests.dropped.Load(), StoredRequestsDropped: a.stored.dropped.Load(),
		PersistDurations: a.st.persistDurations.snapshot(),
	}
	now := a.cfg.Clock.Now()
	for i := range a.shards {
		if sh := a.shards[i].Load(); sh != nil {
			s.ShardsOwned++
			if !now.Before(sh.grant.NotBefore) {
				s.ShardsServing++
			}
			s.Keys += sh.keyCount()
		}
	}
	return s
}

// RememberedRequests calls fn for every gapless request id this node
// stored and still remembers (Config.MaxRequests, RequestTTL). The barrier
// after a MySQL failover stores them again on the new server, where they
// are missing (not replicated before the failover): a retry of an
// answered request id then gets its first answer from any owner, as
// Take promises. Like Remembered, an id is published before its persist's
// gate check, so an id that may be answered is seen by any barrier that
// starts after the gate closed.
func (a *Allocator) RememberedRequests(fn func(Request)) {
	if faultForgetRequests() {
		return
	}
	a.stored.each(a.cfg.Clock.Now(), fn)
}

// persist runs one fenced Store.Persist for the shard, through the gate,
// and returns the gate token it ran under. The rows are published in
// a.reserved (the request ids in a.stored) before the gate's check: a persist that passes it is seen by
// any barrier that starts after the gate closes.
func (a *Allocator) persist(ctx context.Context, sh *shard, rows []Row, reqs []Request) (uint64, error) {
	var token uint64
	if a.cfg.Gate != nil {
		var err error
		if token, err = a.cfg.Gate.Enter(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	part := ShardWrite{Shard: sh.idx, Epoch: sh.grant.Epoch, Rows: rows, Reqs: reqs}
	err := a.commits.persist(ctx, part)
	if errors.Is(err, ErrFenced) {
		// The stored epoch is not ours. If it is lower (a lossy MySQL
		// failover lost our claim) raising it back is safe: epochs come
		// from the coordinator, and a higher owner would have raised it.
		// If it is higher, Claim fails and the shard is gone.
		if cerr := a.cfg.Store.Claim(ctx, sh.idx, sh.grant.Epoch, a.owner); cerr == nil {
			err = a.commits.persist(ctx, part)
		}
	}
	took := time.Since(start)
	a.st.persistNanos.Add(uint64(took))
	a.st.persistDurations.observe(took)
	if err == nil {
		for _, r := range rows {
			a.reserved[sh.idx].raise(r.Key, r.Num)
		}
		a.stored.add(a.cfg.Clock.Now(), reqs)
	}
	if err == nil && a.cfg.Gate != nil {
		err = a.cfg.Gate.Check(token)
	}
	if err != nil {
		a.st.persistFailures.Add(1)
		if errors.Is(err, ErrFenced) {
			a.st.fenced.Add(1)
		}
		return 0, err
	}
	a.st.persists.Add(1)
	a.st.persistedRows.Add(uint64(len(rows)))
	return token, nil
}

// writeBack writes the exact counters of a drained shard, fenced, through
// the gate.
//
// The exact counters (rows non-empty) are refused, before the store is
// touched, when the MySQL server changed since the term was granted: a
// lossy failover may have lost a later owner's epoch claim, so the epoch
// fence would pass this write, which may lower a row below numbers that
// owner answered and its barrier raised on the new server. The gate's
// count of server changes decides (segment.Gate.ServerChanges), not its
// token: a term granted while the gate was closed for another reason (a
// ZooKeeper restore: seed 721 of the simulator, whose rebalancing
// hand-offs after a restore each waited a lease) is handed off exactly.
// Anchored at the term's grant, not at Release's start: a hand-off that begins after the failover, for a term
// granted before it, is exposed the same way. The cost: after a failover
// every hand-off of a shard held across it is unclean (the next owner
// waits a lease); availability only. A write of no rows (clearing the
// store lease) writes no counter and is not refused. The same check runs
// again on the session that writes, once it reached its server, where the
// store can (GatedWriteBacker): a pause between this check and the
// write-back's statement may span the failover, and the write-back's own
// new connection is then the one that finds it.
func (a *Allocator) writeBack(ctx context.Context, sh *shard, rows []Row) error {
	var sinceGrant func() error
	if len(rows) > 0 && a.cfg.Gate != nil && !faultWriteBackAcrossFailover() {
		sinceGrant = func() error {
			if n := a.cfg.Gate.ServerChanges(); n != sh.serverChanges {
				return fmt.Errorf("%w: %d MySQL server change(s) since the term was granted", errServerChangedSinceTerm, n-sh.serverChanges)
			}
			return nil
		}
		if err := sinceGrant(); err != nil {
			return err
		}
	}
	var token uint64
	if a.cfg.Gate != nil {
		var err error
		if token, err = a.cfg.Gate.Enter(); err != nil {
			return err
		}
	}
	var err error
	if gw, ok := a.cfg.Store.(GatedWriteBacker); ok {
		// Checked again on the session that writes, once it reached its
		// server: the write-back's own new connection may be the one that
		// finds the failover (GatedWriteBacker).
		err = gw.WriteBackGated(ctx, sh.idx, sh.grant.Epoch, rows, sinceGrant)
	} else {
		err = a.cfg.Store.WriteBack(ctx, sh.idx, sh.grant.Epoch, rows)
	}
	if err == nil && a.cfg.Gate != nil {
		err = a.cfg.Gate.Check(token)
	}
	if errors.Is(err, ErrFenced) {
		a.st.fenced.Add(1)
	}
	return err
}

// load reads keys of the shard under its epoch, through the gate, and
// returns the gate token it ran under.
func (a *Allocator) load(ctx context.Context, sh *shard, keys []Key) (map[Key]int64, uint64, error) {
	var token uint64
	if a.cfg.Gate != nil {
		var err error
		if token, err = a.cfg.Gate.Enter(); err != nil {
			return nil, 0, err
		}
	}
	out := make(map[Key]int64, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), loadBatch)
		m, err := a.cfg.Store.Load(ctx, sh.idx, sh.grant.Epoch, keys[:n])
		if err != nil {
			if errors.Is(err, ErrFenced) {
				a.st.fenced.Add(1)
			}
			return nil, 0, err
		}
		for k, v := range m {
			out[k] = v
		}
		keys = keys[n:]
	}
	if a.cfg.Gate != nil {
		if err := a.cfg.Gate.Check(token); err != nil {
			return nil, 0, err
		}
	}
	a.st.loads.Add(1)
	return out, token, nil
}

// seenMap is a bounded map of the highest number answered per key.
type seenMap struct {
	mu  sync.Mutex
	m   map[Key]int64
	max int
}

func (s *seenMap) raise(k Key, v int64) {
	s.mu.Lock()
	if old, ok := s.m[k]; !ok || v > old {
		if !ok && len(s.m) >= s.max {
			for victim := range s.m { // random eviction: map order
				delete(s.m, victim)
				break
			}
		}
		s.m[k] = v
	}
	s.mu.Unlock()
}

func (s *seenMap) get(k Key) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}

func (s *seenMap) each(fn func(Key, int64)) {
	s.mu.Lock()
	cp := make(map[Key]int64, len(s.m))
	for k, v := range s.m {
		cp[k] = v
	}
	s.mu.Unlock()
	for k, v := range cp {
		fn(k, v)
	}
}

// addClamp returns a+b, or MaxInt64 when it would overflow.
func addClamp(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
