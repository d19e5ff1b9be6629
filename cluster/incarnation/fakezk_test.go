package incarnation

import (
	"fmt"
	"strings"

	"github.com/idgen/idgen/internal/zkfake"
)

// fakeZK is the shared in-memory ZooKeeper (internal/zkfake), driven by
// hand, with the few words these tests speak.
type fakeZK struct{ *zkfake.Server }

func newFakeZK() *fakeZK { return &fakeZK{zkfake.NewManual()} }

var _ ZK = (*zkfake.Conn)(nil)

// snapshot copies the tree, as a copy of a ZooKeeper data dir.
func (f *fakeZK) snapshot() zkfake.Snapshot { return f.Snapshot() }

// restore replaces the tree by a snapshot (writes since are lost); the
// zxid keeps going up, as it does once a new node writes in a restored
// single server (hole h: nothing is refused, and the clients stay
// connected).
func (f *fakeZK) restore(snap zkfake.Snapshot) { f.RestoreTree(snap, true) }

// wipe empties the tree.
func (f *fakeZK) wipe() { f.WipeTree() }

// client returns a client with a session. lagging: its reads come from a
// copy of the tree taken now (a follower behind the leader) until its
// first write, which, as a real write through the leader does, brings it
// up to date.
func (f *fakeZK) client(lagging bool) *zkfake.Conn {
	c, _ := f.Connect(fmt.Sprintf("client%d", f.Conns()), 0)
	if lagging {
		c.ReadFrom(f.Snapshot())
	}
	return c
}

// failWrites makes every write of c fail with err (a lost connection),
// not applied.
func (f *fakeZK) failWrites(c *zkfake.Conn, err error) {
	f.SetFail(func(by *zkfake.Conn, op, _ string) error {
		if by == c && (op == "create" || op == "set" || op == "delete" || op == "multi") {
			return err
		}
		return nil
	})
}

// paths lists the znodes under prefix (for assertions).
func (f *fakeZK) paths(prefix string) []string {
	var out []string
	for _, p := range f.Paths() {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	return out
}
