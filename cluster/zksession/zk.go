package zksession

import (
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
)

// ZK is the ZooKeeper client calls the guards use. It is narrow so unit
// tests and the simulator can replace ZooKeeper with a fake; *zk.Conn
// implements it.
type ZK interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Get(path string) ([]byte, *zk.Stat, error)
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Children(path string) ([]string, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	Exists(path string) (bool, *zk.Stat, error)
	Delete(path string, version int32) error
	Multi(ops ...any) ([]zk.MultiResponse, error)
	AddAuth(scheme string, auth []byte) error
	SessionID() int64
	State() zk.State
	Close()
}

var _ ZK = (*zk.Conn)(nil)

// ConnectFunc opens a ZooKeeper client. The returned channel carries the
// client's session events; the Session reads it until it is closed.
type ConnectFunc func(servers []string, sessionTimeout time.Duration) (ZK, <-chan zk.Event, error)

// GoZK returns the default ConnectFunc: the go-zookeeper client, logging
// through log at debug level (its messages are per connection attempt; the
// Session logs the transitions that matter).
func GoZK(log *zap.Logger) ConnectFunc {
	return func(servers []string, sessionTimeout time.Duration) (ZK, <-chan zk.Event, error) {
		c, ev, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(cluster.ZKLogger(log)), zk.WithLogInfo(false))
		if err != nil {
			return nil, nil, err
		}
		return c, ev, nil
	}
}

// IsConnErr reports whether err means a request's outcome is unknown
// because the connection dropped (the server may or may not have applied
// it), or that there was no connection to send it on.
func IsConnErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrSessionMoved)
}

// ErrNotUsable is returned by the Session's handle (Session.Conn) for a
// request made while the session is not usable (View.Has false: no
// session, or the credential or the cluster check has not passed since
// the client (re)connected). The request was not sent. It also matches
// zk.ErrNoServer, so guards treat it as a lost connection and retry.
var ErrNotUsable = errors.New("no usable ZooKeeper session")

type notUsableError struct{ why string }

func (e *notUsableError) Error() string {
	return "zksession: " + ErrNotUsable.Error() + " (" + e.why + "): request not sent; retry when the session is back"
}
func (e *notUsableError) Is(target error) bool {
	return target == ErrNotUsable || target == zk.ErrNoServer
}

// handle is the stable ZK the Session hands out (Session.Conn): every
// call goes to the current client, so a guard keeps one handle across
// client replacements. Requests are refused (ErrNotUsable) while the
// session is not usable: no guard writes after a (re)connect before the
// cluster check passed. Close is a no-op: a guard never closes the shared
// session (Session.Close does).
type handle struct {
	s   *Session
	mu  sync.RWMutex
	cur ZK
}

var _ ZK = (*handle)(nil)

func (h *handle) get() ZK {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.cur
}

// use returns the current client if the session is usable.
func (h *handle) use() (ZK, error) {
	if why := h.s.unusable(); why != "" {
		return nil, &notUsableError{why}
	}
	return h.get(), nil
}

// swap installs next and returns the previous client (the caller closes it).
func (h *handle) swap(next ZK) ZK {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.cur
	h.cur = next
	return prev
}

func (h *handle) Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	c, err := h.use()
	if err != nil {
		return "", err
	}
	return c.Create(path, data, flags, acl)
}

func (h *handle) Get(path string) ([]byte, *zk.Stat, error) {
	c, err := h.use()
	if err != nil {
		return nil, nil, err
	}
	return c.Get(path)
}

func (h *handle) GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	c, err := h.use()
	if err != nil {
		return nil, nil, nil, err
	}
	return c.GetW(path)
}

func (h *handle) Set(path string, data []byte, version int32) (*zk.Stat, error) {
	c, err := h.use()
	if err != nil {
		return nil, err
	}
	return c.Set(path, data, version)
}

func (h *handle) Children(path string) ([]string, *zk.Stat, error) {
	c, err := h.use()
	if err != nil {
		return nil, nil, err
	}
	return c.Children(path)
}

func (h *handle) ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	c, err := h.use()
	if err != nil {
		return nil, nil, nil, err
	}
	return c.ChildrenW(path)
}

func (h *handle) Exists(path string) (bool, *zk.Stat, error) {
	c, err := h.use()
	if err != nil {
		return false, nil, err
	}
	return c.Exists(path)
}

func (h *handle) Delete(path string, version int32) error {
	c, err := h.use()
	if err != nil {
		return err
	}
	return c.Delete(path, version)
}

func (h *handle) Multi(ops ...any) ([]zk.MultiResponse, error) {
	c, err := h.use()
	if err != nil {
		return nil, err
	}
	return c.Multi(ops...)
}

func (h *handle) AddAuth(scheme string, auth []byte) error { return h.get().AddAuth(scheme, auth) }
func (h *handle) SessionID() int64                         { return h.get().SessionID() }
func (h *handle) State() zk.State                          { return h.get().State() }

// Close does nothing: the Session owns its clients (see Session.Close).
func (h *handle) Close() {}
