package zkown

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/zksession"
)

// ZK is the part of the ZooKeeper client the coordinator uses: the node's
// session manager's (zksession.ZK); *zk.Conn implements it, and the tests
// use an in-memory fake.
type ZK = zksession.ZK

var _ ZK = (*zk.Conn)(nil)

// usableConn is the session's stable handle, reporting a session only
// while the Session calls it usable (View.Has: a session AND the cluster
// check passed since it (re)connected), so cluster.Call never writes
// before the incarnation check.
type usableConn struct {
	ZK
	s *zksession.Session
}

func (u usableConn) State() zk.State {
	if u.s.View().Has {
		return zk.StateHasSession
	}
	return zk.StateDisconnected
}

// openSession opens the coordinator's own Session (Config.Session nil:
// tests, tools); the server passes the node's shared one.
func openSession(ctx context.Context, cfg Config) (*zksession.Session, error) {
	s, err := zksession.Open(ctx, zksession.Config{Servers: cfg.Servers, SessionTimeout: cfg.SessionTimeout,
		Auth: cfg.Auth, Logger: cfg.Logger.Named("zk")})
	if err != nil {
		return nil, fmt.Errorf("zkown: %w", err)
	}
	return s, nil
}

// watchSession follows the Session's view until Close: a usable session
// (new, replaced, or back after a disconnect) wakes the renewer and the
// reconcile loop; an expiry is logged; a detected wipe or restore
// (View.Restores grew) applies the restore rule (restored).
func (c *Coordinator) watchSession(base zksession.View) {
	defer close(c.drainDone)
	last := base
	for {
		v, ch := c.sess.ViewChanged()
		if v.Restores != last.Restores {
			c.restored(v.RestoreWhy)
		}
		if v.Expired != last.Expired {
			c.log.Warn("ORDERED coordinator: ZooKeeper session expired; this node's znode is gone, its lease will not be renewed")
			wake(c.renewKick)
		}
		if v.Has && (!last.Has || v.ID != last.ID || v.Client != last.Client) {
			wake(c.renewKick)
			wake(c.kick)
		}
		last = v
		select {
		case <-ch:
		case <-c.stopAll:
			return
		}
	}
}

// usable reports whether ZooKeeper may be used now.
func (c *Coordinator) usable() bool { return c.conn.State() == zk.StateHasSession }

// noteStat reports a zxid seen in an answer to the Session (its
// lost-writes rule compares it with the servers').
func (c *Coordinator) noteStat(st *zk.Stat) {
	if c.sess != nil && st != nil {
		c.sess.NoteZxid(max(st.Mzxid, st.Czxid, st.Pzxid))
	}
}

// call runs one ZooKeeper operation bounded by timeout (cluster.Call: no
// queueing behind a reconnect, an operation that cannot finish in time is
// abandoned, its outcome unknown).
func (c *Coordinator) call(ctx context.Context, timeout time.Duration, f func() error) error {
	if err := cluster.Call(ctx, c.conn, timeout, f); err != nil {
		return fmt.Errorf("zkown: %w", err)
	}
	return nil
}

// conflict reports whether err is a lost compare-and-set (the znode
// changed or went since it was read), as opposed to an unknown outcome.
func conflict(err error) bool {
	return errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNodeExists)
}

// multiErr returns the error of a Multi: its own, or the first op's.
func multiErr(res []zk.MultiResponse, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}
