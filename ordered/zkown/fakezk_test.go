package zkown

import (
	"fmt"
	"time"

	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/internal/zkfake"
)

// fakeZK is the shared in-memory ZooKeeper (internal/zkfake), driven by
// hand: a tree of znodes with versions, zxids and ephemerals, sessions the
// test can take down, expire and close, data and children watches, Multi,
// and hooks that run (or fail) an operation's caller-visible effect at a
// chosen point (SetHook, SetFail).
type fakeZK struct{ *zkfake.Server }

// fakeConn is one client session.
type fakeConn = zkfake.Conn

var _ ZK = (*fakeConn)(nil)

func newFakeZK() *fakeZK { return &fakeZK{zkfake.NewManual()} }

func (f *fakeZK) setHook(h func(c *fakeConn, op, p string))        { f.SetHook(h) }
func (f *fakeZK) setFail(fn func(c *fakeConn, op, p string) error) { f.SetFail(fn) }

// connect opens a session (each client under a name of its own).
func (f *fakeZK) connect() *fakeConn {
	c, _ := f.Connect(fmt.Sprintf("client%d", f.Conns()), time.Minute)
	return c
}

// put writes a znode directly, as another client would (test setup).
func (f *fakeZK) put(p string, data []byte) { f.Put(p, data) }

// expire ends c's session on the server (its ephemerals go) and gives c a
// new session, like the real client after StateExpired.
func (f *fakeZK) expire(c *fakeConn) { c.Renew(false) }

// setDown takes the connection down (ZooKeeper unreachable) or up again
// within its session.
func setDown(c *fakeConn, down bool) {
	if down {
		c.Disconnect()
	} else {
		c.Reconnect()
	}
}

// fakeClock is the project's settable clock (clocktest.Fake).
type fakeClock = clocktest.Fake

func newFakeClock() *fakeClock { return clocktest.New(time.Unix(1_000_000, 0)) }
