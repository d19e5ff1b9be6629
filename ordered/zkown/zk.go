package zkown

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
)

// ZK is the part of the ZooKeeper client the coordinator uses; *zk.Conn
// implements it, and the tests use an in-memory fake.
type ZK interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Get(path string) ([]byte, *zk.Stat, error)
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Children(path string) ([]string, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	Exists(path string) (bool, *zk.Stat, error)
	Delete(path string, version int32) error
	// Multi applies *zk.CheckVersionRequest and *zk.SetDataRequest (and
	// the other request types) atomically.
	Multi(ops ...any) ([]zk.MultiResponse, error)
	SessionID() int64
	State() zk.State
	Close()
}

var _ ZK = (*zk.Conn)(nil)

// dial connects and waits for a session (bounded by ctx), with the digest
// credential; the coordinator reads the session events (drain).
func dial(ctx context.Context, cfg Config) (*zk.Conn, <-chan zk.Event, error) {
	c, events, err := cluster.Dial(ctx, cfg.Servers, cfg.SessionTimeout, cfg.Auth, cfg.Logger)
	if err != nil {
		return nil, nil, fmt.Errorf("zkown: %w", err)
	}
	return c, events, nil
}

// drain reads the client's session events; a new session (after a
// disconnection or an expiry) wakes the renewer and the reconcile loop.
func (c *Coordinator) drain(events <-chan zk.Event) {
	defer close(c.drainDone)
	for ev := range events {
		if ev.Type != zk.EventSession {
			continue
		}
		switch ev.State {
		case zk.StateHasSession:
			wake(c.renewKick)
			wake(c.kick)
		case zk.StateExpired:
			c.log.Warn("ORDERED coordinator: ZooKeeper session expired; this node's znode is gone, its lease will not be renewed")
			wake(c.renewKick)
		}
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
