package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/zksession"
)

// ZK is the part of the ZooKeeper client the worker package uses. It is
// narrow so unit tests can replace ZooKeeper with a hand-written fake;
// *zk.Conn implements it.
type ZK interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Get(path string) ([]byte, *zk.Stat, error)
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Children(path string) ([]string, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	Exists(path string) (bool, *zk.Stat, error)
	Delete(path string, version int32) error
	AddAuth(scheme string, auth []byte) error
	SessionID() int64
	State() zk.State
	Close()
}

var _ ZK = (*zk.Conn)(nil)

// connectZK returns the default ConnectFunc: the go-zookeeper client,
// logging through log at debug level (its messages are per connection
// attempt; the lease logs the transitions that matter).
func connectZK(log *zap.Logger) ConnectFunc {
	return func(servers []string, sessionTimeout time.Duration) (ZK, <-chan zk.Event, error) {
		c, ev, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(cluster.ZKLogger(log)), zk.WithLogInfo(false))
		if err != nil {
			return nil, nil, err
		}
		return c, ev, nil
	}
}

// DialZK connects to ZooKeeper and waits until the client has a session
// (zk.StateHasSession; StateConnected is only a TCP connection). auth is an
// optional digest credential "user:password". The client's event channel is
// drained in the background so that no event is left unread; watches are
// delivered on their own channels. Used by idctl and by the server's
// ListWorkers RPC (through cluster.Dial); the lease itself connects
// through Config.Connect.
func DialZK(ctx context.Context, servers []string, sessionTimeout time.Duration, auth string, log *zap.Logger) (*zk.Conn, error) {
	if sessionTimeout <= 0 {
		sessionTimeout = DefaultSessionTimeout
	}
	c, events, err := cluster.Dial(ctx, servers, sessionTimeout, auth, log)
	if errors.Is(err, cluster.ErrNoSession) {
		return nil, fmt.Errorf("%w: %v", ErrZKUnavailable, err)
	}
	if err != nil {
		return nil, err
	}
	go func() {
		for range events {
		}
	}()
	return c, nil
}

// aclFor returns the ACL of the znodes this node creates under the
// cluster: open when no credential is configured, else all permissions for
// the digest user only.
func aclFor(auth string) []zk.ACL {
	acl, err := cluster.ACL(auth)
	if err != nil { // Config.Validate refused it already
		return zk.WorldACL(zk.PermAll)
	}
	return acl
}

// isConnErr reports whether err means the request's outcome is unknown
// because the connection dropped (the server may or may not have applied it).
func isConnErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrSessionMoved)
}

// ServerStat is one ZooKeeper server's answer to srvr (see zksession).
type ServerStat = zksession.ServerStat

// ServerStatsFunc asks each server with srvr (see zksession).
type ServerStatsFunc = zksession.ServerStatsFunc

var srvrStats ServerStatsFunc = zksession.SrvrStats
