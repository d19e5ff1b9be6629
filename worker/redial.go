package worker

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// A ZooKeeper ensemble that lost its state (restarted with an empty data
// dir, or a single server restored from an old snapshot) refuses the
// handshake of every client that has seen a newer zxid than its own: the
// server closes the connection, the go-zookeeper client reconnects offering
// the same zxid, and so on forever ("authentication failed: EOF" every
// second). Only a new client, which offers no zxid, gets a session again.
//
// But an ensemble that elects a leader, or a server still syncing, closes
// handshakes in just the same way, and there the session is alive: a new
// client would abandon it (closing a client without a session tells the
// server nothing), so its slot claim would stay for a session timeout and
// SNOWFLAKE would stop for nothing. So refused handshakes only make the
// lease ask the servers (srvr, see srvr.go), and it replaces its client
// only when the session is really gone:
//   - a serving server's zxid is below the highest zxid this lease saw:
//     the ensemble lost writes, it will refuse this client forever (and the
//     cluster is marked restored, see meta.go);
//   - servers have served for longer than a session timeout without giving
//     the client its session back: a serving ensemble has expired it (and
//     if they refused its handshakes all along, they lost writes it saw:
//     a serving server refuses only a client with a newer zxid; the cluster
//     is marked restored too);
//   - no server answers srvr (not allowed by 4lw.commands.whitelist, or
//     down) and the refusals have lasted longer than the lead: the mark
//     has run out anyway.
//
// An election within the outage tolerance costs nothing: the client gets
// its session back and the holder never stopped.

// redialAfter is how many refused handshakes in a row (TCP connected,
// closed before a session) make the lease ask the servers why with every
// rule; a client without a session for refusalCheckEvery is checked for
// lost writes alone (its handshakes may hang rather than be refused: the
// client waits up to ten receive timeouts for an answer).
const redialAfter = 3

// refusalCheckEvery is how often the servers are asked while the client
// has no session, and srvrTimeout how long each may take to answer (a
// loaded server answers slowly; no answer counts as not serving).
const (
	refusalCheckEvery = time.Second
	srvrTimeout       = 3 * time.Second
)

// refusalVerdict is what the servers said about a run of refused handshakes.
type refusalVerdict struct {
	replace bool   // the session is gone: connect a new client
	lost    string // non-empty: ZooKeeper lost writes (why)
	serving bool   // some server serves clients
	why     string // for the log
}

// judgeRefusals decides whether the refused client's session is gone (see
// above). since is when the session was lost, servingSince when servers
// were first seen serving during these refusals (zero: not yet).
//
// refusals is how many handshakes were refused in a row: below redialAfter
// (the client is merely disconnected, or its handshakes hang), only the
// first rule applies, so a plain outage never costs the session.
func (l *ZKLease) judgeRefusals(since, servingSince time.Time, refusals int) refusalVerdict {
	l.mu.Lock()
	seen := l.maxZxid
	l.mu.Unlock()
	var v refusalVerdict
	for _, st := range l.cfg.ServerStats(l.cfg.Servers, srvrTimeout) {
		if st.Err != nil || !st.Serving {
			continue
		}
		v.serving = true
		if st.Zxid < seen {
			v.replace = true
			v.lost = fmt.Sprintf("ZooKeeper server %s is at zxid 0x%x, below 0x%x that this node saw: the ensemble lost writes (wiped or restored from an older copy)", st.Server, st.Zxid, seen)
			v.why = v.lost
			return v
		}
	}
	now := time.Now()
	switch {
	case v.serving && !servingSince.IsZero() && now.Sub(servingSince) > l.cfg.SessionTimeout:
		// A serving ensemble that has not heard from a session for a
		// session timeout has expired it (an election gives every session
		// a fresh timeout when the new leader starts, which servingSince
		// follows), so the old client can only get a new session: a new
		// client does that without waiting for its handshakes, which may
		// hang for ten receive timeouts on a loaded server. And a serving
		// server closes a handshake only for a client that saw a newer
		// zxid than its own (a follower behind catches up in
		// milliseconds): refused that long, it lost writes this client saw.
		v.replace = true
		v.why = fmt.Sprintf("ZooKeeper has served for %v, more than the session timeout %v, without giving this client its session back: the session is gone", now.Sub(servingSince).Round(time.Millisecond), l.cfg.SessionTimeout)
		if refusals >= redialAfter {
			v.why = fmt.Sprintf("ZooKeeper serves but has refused this client for %v, more than the session timeout %v: it lost writes this client saw", now.Sub(servingSince).Round(time.Millisecond), l.cfg.SessionTimeout)
			v.lost = v.why
		}
	case refusals < redialAfter:
		v.why = "disconnected from ZooKeeper; no server has lost writes this client saw: keeping the session"
	case !v.serving && now.Sub(since) > l.cfg.Lead():
		v.replace = true
		v.why = fmt.Sprintf("no ZooKeeper server says why it refuses this client (srvr unanswered) and the refusals have lasted %v, past the lead %v", now.Sub(since).Round(time.Millisecond), l.cfg.Lead())
	case v.serving:
		v.why = "ZooKeeper serves again (an election or a sync ended); waiting for the session to come back"
	default:
		v.why = "no ZooKeeper server serves (an election, or servers still syncing): keeping the session"
	}
	return v
}

// noteZxid records the highest zxid seen in an answer.
func (l *ZKLease) noteZxid(z int64) {
	l.mu.Lock()
	l.maxZxid = max(l.maxZxid, z)
	l.mu.Unlock()
}

// swapZK is a ZK whose underlying client can be replaced. Every call goes
// to the current client.
type swapZK struct {
	mu  sync.RWMutex
	cur ZK
}

var _ ZK = (*swapZK)(nil)

func (s *swapZK) get() ZK {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cur
}

// swap installs next and closes the previous client.
func (s *swapZK) swap(next ZK) {
	s.mu.Lock()
	prev := s.cur
	s.cur = next
	s.mu.Unlock()
	if prev != nil {
		prev.Close()
	}
}

func (s *swapZK) Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	return s.get().Create(path, data, flags, acl)
}
func (s *swapZK) Get(path string) ([]byte, *zk.Stat, error) { return s.get().Get(path) }
func (s *swapZK) GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	return s.get().GetW(path)
}
func (s *swapZK) Set(path string, data []byte, version int32) (*zk.Stat, error) {
	return s.get().Set(path, data, version)
}
func (s *swapZK) Children(path string) ([]string, *zk.Stat, error) { return s.get().Children(path) }
func (s *swapZK) ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	return s.get().ChildrenW(path)
}
func (s *swapZK) Exists(path string) (bool, *zk.Stat, error) { return s.get().Exists(path) }
func (s *swapZK) Delete(path string, version int32) error    { return s.get().Delete(path, version) }
func (s *swapZK) AddAuth(scheme string, auth []byte) error   { return s.get().AddAuth(scheme, auth) }
func (s *swapZK) SessionID() int64                           { return s.get().SessionID() }
func (s *swapZK) State() zk.State                            { return s.get().State() }
func (s *swapZK) Close()                                     { s.get().Close() }
