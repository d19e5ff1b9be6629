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

// ZK is the part of the ZooKeeper client the worker package uses (see
// zksession.ZK); *zk.Conn implements it, and so does the tests' fake.
type ZK = zksession.ZK

// DialZK connects to ZooKeeper and waits until the client has a session
// (zk.StateHasSession; StateConnected is only a TCP connection). auth is an
// optional digest credential "user:password". The client's event channel is
// drained in the background so that no event is left unread; watches are
// delivered on their own channels. Used by idctl and by the server's
// ListWorkers RPC (through cluster.Dial); the lease itself uses a
// zksession.Session.
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
func isConnErr(err error) bool { return zksession.IsConnErr(err) }

// ServerStat is one ZooKeeper server's answer to srvr (see zksession).
type ServerStat = zksession.ServerStat

// ServerStatsFunc asks each server with srvr (see zksession).
type ServerStatsFunc = zksession.ServerStatsFunc
