package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
)

// Dial connects to ZooKeeper and waits until the client has a session
// (zk.StateHasSession; StateConnected is only a TCP connection), bounded
// by ctx (else an error wrapping ErrNoSession), then adds the digest credential auth ("user:password", optional).
// The client logs through log at debug level (nil: no logs); its messages
// are per connection attempt, so callers log the transitions that matter.
//
// The caller owns the returned event channel and must keep reading it
// (events nobody reads are dropped, and a full channel stalls the
// client): drain it, or watch it for session changes.
func Dial(ctx context.Context, servers []string, sessionTimeout time.Duration, auth string, log *zap.Logger) (*zk.Conn, <-chan zk.Event, error) {
	c, events, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(ZKLogger(log)), zk.WithLogInfo(false))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNoSession, err)
	}
	for c.State() != zk.StateHasSession {
		select {
		case <-ctx.Done():
			c.Close()
			return nil, nil, fmt.Errorf("%w with %s: %v", ErrNoSession, strings.Join(servers, ","), ctx.Err())
		case <-events:
		case <-time.After(20 * time.Millisecond):
		}
	}
	if auth != "" {
		if err := c.AddAuth("digest", []byte(auth)); err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("ZooKeeper digest authentication: %w", err)
		}
	}
	return c, events, nil
}

// ZKLogger adapts log (nil: none) to the ZooKeeper client's logger, at
// debug level.
func ZKLogger(log *zap.Logger) zk.Logger {
	if log == nil {
		log = zap.NewNop()
	}
	return zkLogger{log.Named("zk").Sugar()}
}

type zkLogger struct{ s *zap.SugaredLogger }

func (l zkLogger) Printf(format string, args ...any) { l.s.Debugf(format, args...) }
