package worker

import (
	"sync"

	"github.com/go-zookeeper/zk"
)

// A ZooKeeper ensemble that lost its state (restarted with an empty data
// dir, or restored from an old snapshot) refuses the handshake of every
// client that has seen a newer zxid than its own: the server closes the
// connection, the go-zookeeper client reconnects offering the same zxid,
// and so on forever ("authentication failed: EOF" every second). Only a new
// client, which offers no zxid, gets a session again. So the lease keeps
// its client behind swapZK and replaces it after redialAfter handshakes in
// a row were refused; the new session then re-claims the slot through the
// ordinary expiry path (re-creating the cluster znodes, waiting past the
// marks, see reclaim).

// redialAfter is how many refused handshakes in a row (TCP connected,
// closed before a session) make the lease replace its client. The
// go-zookeeper client retries about once a second, so this is a few
// seconds; a server that is merely restarting refuses none.
const redialAfter = 3

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
