package zksession

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
)

// Defaults of Config.
const (
	DefaultSessionTimeout = 10 * time.Second
	// DefaultLead is Config.Lead's default: the worker lease's default
	// lead (heartbeat, outage tolerance and margin) rounded up.
	DefaultLead = 40 * time.Second
)

// Errors of the package.
var (
	// ErrRefused is wrapped by a Check error that will not change by
	// retrying (the cluster was re-created, this node belongs to another
	// incarnation): the Session stops reporting a usable session
	// (View.Has stays false, View.Refused says why) until it is closed.
	ErrRefused = errors.New("ZooKeeper session refused by the cluster check")
	// ErrClosed: the Session was closed.
	ErrClosed = errors.New("ZooKeeper session closed")
	// ErrNoSession: Open's context ended before a usable session.
	ErrNoSession = errors.New("no usable ZooKeeper session")
	// ErrInvalidConfig: a Config field is invalid; the message names it.
	ErrInvalidConfig = errors.New("invalid ZooKeeper session config")
)

// Config configures a Session. Servers is required; every other zero
// field is a documented default.
type Config struct {
	Servers        []string
	SessionTimeout time.Duration // default DefaultSessionTimeout
	// Auth is an optional digest credential "user:password", added to
	// every new client before its session is reported usable.
	Auth string
	// Connect opens a client (nil: go-zookeeper, see GoZK).
	Connect ConnectFunc
	// ServerStats asks the servers for their mode and zxid when the client
	// has no session (nil: SrvrStats, the srvr four-letter word).
	ServerStats ServerStatsFunc
	// Lead bounds the "no server answers srvr" rule: refusals nobody
	// explains are waited out this long before the client is replaced
	// (the worker passes its lead, after which its marks have run out).
	// Default DefaultLead.
	Lead time.Duration
	// Check runs after every (re)connect (a new session, a new client, and
	// the same session back after a disconnect) before the session is
	// reported usable (View.Has). It is the cluster incarnation check.
	// restored=true means ZooKeeper was wiped or restored from an older
	// copy: counted in View.Restores, logged with why. err != nil means
	// "cannot tell yet": retried with backoff, Has stays false. An error
	// wrapping ErrRefused is permanent: Has stays false and View.Refused
	// says why until the Session is closed. nil: no check.
	Check func(ctx context.Context, conn ZK) (restored bool, why string, err error)
	// Logger: nil means no logs.
	Logger *zap.Logger
	// Now is the clock of the redial rules (nil: time.Now; the simulator
	// drives a fake clock).
	Now func() time.Time
}

// Validate returns ErrInvalidConfig naming the first invalid field.
func (c Config) Validate() error {
	bad := func(field, why string) error { return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, why) }
	switch {
	case len(c.Servers) == 0:
		return bad("Servers", "is empty: give at least one ZooKeeper host:port")
	case c.SessionTimeout < 0:
		return bad("SessionTimeout", "is negative")
	case c.Lead < 0:
		return bad("Lead", "is negative")
	}
	for _, s := range c.Servers {
		if strings.TrimSpace(s) == "" {
			return bad("Servers", "has an empty entry")
		}
	}
	if _, err := cluster.ACL(c.Auth); err != nil {
		return bad("Auth", err.Error())
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.Lead == 0 {
		c.Lead = DefaultLead
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Connect == nil {
		c.Connect = GoZK(c.Logger)
	}
	if c.ServerStats == nil {
		c.ServerStats = SrvrStats
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// View is a snapshot of the session. Compare snapshots (ID, Client,
// Expired, Restores) rather than waiting for particular transitions: a
// consumer may miss intermediate states, never a change of these counters.
type View struct {
	// Has: usable. The client has a ZooKeeper session (StateHasSession,
	// not just a TCP connection) AND, since it (re)connected, the
	// credential was added and Config.Check passed.
	Has bool
	// ID is the session id seen at the last StateHasSession (0: none yet).
	ID int64
	// Client counts the clients created so far (1 for the first; a
	// replaced client increments it).
	Client int
	// Expired counts StateExpired events.
	Expired uint64
	// Restores counts wipes or restores detected (by Check, or by the
	// lost-writes rule when there is no Check). Guards apply the restore
	// rule when it grows; RestoreWhy says why (the latest).
	Restores   uint64
	RestoreWhy string
	// RestoredAt is when Restores last grew (Config.Now; zero: never).
	RestoredAt time.Time
	// LostAt is when the session was last seen lost (zero while Has).
	LostAt time.Time
	// UsableSince is when the session last became usable (zero while
	// not Has), and OutageFrom the LostAt of the outage that ended then
	// (the node's start for its first session). A guard that counts
	// other nodes out because they did not renew something in ZooKeeper
	// uses them: a node that could not renew while this node could not
	// reach ZooKeeper either may have been cut off by the same outage,
	// and gets time to come back (segment/zkguard's barrier).
	UsableSince, OutageFrom time.Time
	// At is when this View was taken, on the same clock (Config.Now), so
	// a reader can age the times above without mixing clocks.
	At time.Time
	// Refusals is how many handshakes were refused in a row (a TCP
	// connection the server closed before a session); reset by a session.
	Refusals int
	// Closed: Session.Close was called.
	Closed bool
	// Refused is why Check refused this node for good (ErrRefused), or "".
	Refused string
}

// Session is the node's ZooKeeper session (see the package doc). Its
// methods are safe for concurrent use.
type Session struct {
	cfg  Config
	log  *zap.Logger
	h    *handle
	wake chan struct{} // pokes the loop (buffer 1)

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// applied counts the probes whose verdict the loop has applied: a
	// test that drives a fake clock moves it only once the last probe is
	// applied (a verdict applied after the move would schedule the next
	// probe from the moved clock, and the move would be lost).
	applied atomic.Int64

	mu      sync.Mutex
	v       View
	changed chan struct{}
	zkHas   bool // the current client is at StateHasSession (Has may wait for auth and Check)
	conns   int  // StateHasSession events of the current client: a Check result of an older one is stale
	tcp     bool // connected (StateConnected), no session or disconnect since
	gone    bool // the current client's event channel closed: it will not come back
	authed  int  // the client number the credential was added to
	maxZxid int64
	// unusableFrom is when the session last stopped being usable (the
	// start, before the first): View.OutageFrom once usable again. Not
	// LostAt, which a replaced client moves to its own start.
	unusableFrom time.Time
}

// Start creates the Session and its first client and returns without
// waiting for a session (a node that may start without ZooKeeper, as the
// worker lease's degraded start, watches View). It fails only when the
// configuration is invalid or the first client cannot be created.
func Start(cfg Config) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	conn, events, err := cfg.Connect(cfg.Servers, cfg.SessionTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: connect to %s: %v", ErrNoSession, strings.Join(cfg.Servers, ","), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
	}
	s.h = &handle{s: s}
	s.v.LostAt = cfg.Now()
	s.unusableFrom = s.v.LostAt
	s.attach(conn, events)
	go s.run()
	return s, nil
}

// Open is Start, then waits for the first usable session (after the
// credential and Check), bounded by ctx: ErrNoSession when ctx ends
// first, an error wrapping ErrRefused when Check refused the node.
func Open(ctx context.Context, cfg Config) (*Session, error) {
	s, err := Start(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Wait(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Wait waits until the session is usable (View.Has), bounded by ctx.
func (s *Session) Wait(ctx context.Context) error {
	for {
		v, ch := s.view()
		switch {
		case v.Has:
			return nil
		case v.Closed:
			return ErrClosed
		case v.Refused != "":
			return fmt.Errorf("%w: %s", ErrRefused, v.Refused)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w with %s: %v", ErrNoSession, strings.Join(s.cfg.Servers, ","), ctx.Err())
		}
	}
}

// Conn returns the session's client handle. It is stable: every call goes
// to the current client, so it stays valid across client replacements.
// While the session is not usable (View.Has false) its requests are
// refused with ErrNotUsable, unsent. Its Close does nothing (guards never
// close the shared session).
func (s *Session) Conn() ZK { return s.h }

// Client returns the current underlying client, for tests and
// diagnostics (which fake connection to disconnect, say). Guards use Conn:
// a client taken here goes stale at the next replacement, and closing it
// would cut every guard's session.
func (s *Session) Client() ZK { return s.h.get() }

// View returns a snapshot of the session.
func (s *Session) View() View {
	v, _ := s.view()
	return v
}

// Changed returns a channel closed at the next View change. A change
// between a View call and a Changed call would be missed: take Changed
// first, then View, or use ViewChanged, which takes both atomically.
func (s *Session) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// ViewChanged returns the view and the channel closed at its next change,
// atomically.
func (s *Session) ViewChanged() (View, <-chan struct{}) { return s.view() }

func (s *Session) view() (View, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.v
	v.At = s.cfg.Now()
	return v, s.changed
}

// unusable says why requests are refused now ("" while usable).
func (s *Session) unusable() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.v.Has:
		return ""
	case s.v.Closed:
		return "session closed"
	case s.v.Refused != "":
		return s.v.Refused
	case s.zkHas:
		return "the cluster check has not passed since the client reconnected"
	}
	return "disconnected"
}

// NoteZxid records a zxid a guard saw in an answer (Stat.Mzxid, Czxid,
// Pzxid): the lost-writes rule compares the servers' zxids with the
// highest one seen by the current client.
func (s *Session) NoteZxid(z int64) {
	s.mu.Lock()
	s.maxZxid = max(s.maxZxid, z)
	s.mu.Unlock()
}

// NoteRestore counts a wipe or restore of ZooKeeper that the node saw
// outside Check (the incarnation touch after a slot claim or on a
// heartbeat: ZooKeeper went back within a session, which no (re)connect
// shows). It is the same path as a loss Check finds: View.Restores grows,
// RestoreWhy says why, and every guard applies the restore rule at once,
// not at the session's next reconnect. A closed Session ignores it.
func (s *Session) NoteRestore(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.v.Closed {
		return
	}
	s.v.Restores++
	s.v.RestoredAt = s.cfg.Now()
	s.v.RestoreWhy = why
	s.log.Error("ZooKeeper was wiped or restored from an older copy (seen within the session): every guard applies the restore rule",
		zap.String("why", why), zap.Uint64("restores", s.v.Restores))
	s.signal()
}

// Config returns the session's configuration with defaults applied.
func (s *Session) Config() Config { return s.cfg }

// Close closes the client and stops the Session. Only the Session's
// opener closes it (the server, at the very end; a test; idctl).
func (s *Session) Close() {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.mu.Lock()
		s.v.Closed = true
		s.lostLocked()
		s.signal()
		s.mu.Unlock()
		if c := s.h.get(); c != nil {
			c.Close()
		}
	})
}

// attach makes conn the current client and starts reading its events; a
// replaced client's later events are ignored.
func (s *Session) attach(conn ZK, events <-chan zk.Event) {
	prev := s.h.swap(conn)
	s.mu.Lock()
	s.v.Client++
	s.v.Refusals, s.tcp, s.gone, s.zkHas = 0, false, false, false
	s.conns = 0
	// The new client has seen nothing of any ensemble: zxids are compared
	// from its own answers on (a wiped ensemble starts at zero, and the
	// old client's zxids would condemn every new client as well).
	s.maxZxid = 0
	s.lostLocked()
	// The new client gets its own time to connect before anyone judges
	// its lack of a session.
	s.v.LostAt = s.cfg.Now()
	gen := s.v.Client
	s.signal()
	s.mu.Unlock()
	if prev != nil {
		prev.Close()
	}
	go s.read(conn, events, gen)
}

// read reads one client's event channel; it never blocks on consumers.
func (s *Session) read(conn ZK, events <-chan zk.Event, gen int) {
	for ev := range events {
		if ev.Type != zk.EventSession {
			continue
		}
		s.mu.Lock()
		if gen != s.v.Client || s.v.Closed { // a replaced client: drain, ignore
			s.mu.Unlock()
			continue
		}
		changed := true
		switch ev.State {
		case zk.StateHasSession:
			s.zkHas = true
			s.conns++
			s.v.ID = conn.SessionID()
			s.v.Refusals, s.tcp = 0, false
			if s.cfg.Check == nil && (s.cfg.Auth == "" || s.authed == gen) && s.v.Refused == "" {
				s.usableLocked()
			}
		case zk.StateExpired:
			s.v.Expired++
			s.lostLocked()
		case zk.StateConnected:
			s.tcp = true
			changed = s.zkHas || s.v.Has
			s.lostLocked()
		case zk.StateConnecting:
			// Still without a session if it was lost; unchanged otherwise
			// (the client reports Connecting only after Disconnected).
			changed = s.zkHas || s.v.Has
			s.lostLocked()
		default: // Disconnected, AuthFailed, ...
			if s.tcp && !s.zkHas {
				s.v.Refusals++ // the server closed the connection before a session
			}
			s.tcp = false
			s.lostLocked()
		}
		if changed {
			s.signal()
		}
		s.mu.Unlock()
		s.poke()
	}
	s.mu.Lock()
	if gen == s.v.Client && !s.v.Closed {
		s.gone = true
		s.lostLocked()
		s.signal()
	}
	s.mu.Unlock()
	s.poke()
}

// usableLocked reports the session usable; s.mu is held.
func (s *Session) usableLocked() {
	if !s.v.Has {
		s.v.UsableSince, s.v.OutageFrom = s.cfg.Now(), s.unusableFrom
	}
	s.v.Has = true
	s.v.LostAt = time.Time{}
}

// lostLocked records the loss of the session; s.mu is held.
func (s *Session) lostLocked() {
	if s.v.Has || s.zkHas {
		s.v.LostAt = s.cfg.Now()
	}
	if s.v.Has {
		s.unusableFrom = s.v.LostAt
	}
	s.v.Has, s.zkHas = false, false
	s.v.UsableSince = time.Time{}
}

// signal wakes the consumers; s.mu is held.
func (s *Session) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// poke wakes the loop.
func (s *Session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
