package zkfake

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// waitState polls c until it reaches want (the fake's loop runs every few
// milliseconds; the bound is generous).
func waitState(t *testing.T, c *Conn, want zk.State) {
	t.Helper()
	waitUntil(t, func() bool { return c.State() == want }, func() string {
		return fmt.Sprintf("%s: state %v, want %v", c.Name(), c.State(), want)
	})
}

// connect opens a client named name and waits for its session.
func connect(t *testing.T, s *Server, name string, timeout time.Duration) *Conn {
	t.Helper()
	c, _ := s.Connect(name, timeout)
	waitState(t, c, zk.StateHasSession)
	return c
}

// waitNewSession waits for c's next session and fails if it is the
// session sid, which the server should have expired.
func waitNewSession(t *testing.T, c *Conn, sid int64) {
	t.Helper()
	waitState(t, c, zk.StateHasSession)
	if c.SessionID() == sid {
		t.Fatalf("%s kept session %#x, which should have expired", c.Name(), sid)
	}
}

// waitUntil polls done until it holds, and fails with failure() if it
// does not within a generous bound (the fake's loop runs every few
// milliseconds).
func waitUntil(t *testing.T, done func() bool, failure func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal(failure())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPartitionExpiresTheSessionAndItsEphemerals(t *testing.T) {
	s := New()
	defer s.Close()
	c := connect(t, s, "n1", 50*time.Millisecond)
	if _, err := c.Create("/e", nil, zk.FlagEphemeral, nil); err != nil {
		t.Fatal(err)
	}
	sid := c.SessionID()
	s.SetPartitioned("n1", true)
	if _, _, err := c.Get("/e"); !errors.Is(err, zk.ErrNoServer) {
		t.Fatalf("a partitioned client's Get: %v, want ErrNoServer", err)
	}
	waitUntil(t, func() bool { _, _, ok := s.Get("/e"); return !ok },
		func() string { return "the ephemeral outlived its partitioned session" })
	s.SetPartitioned("n1", false)
	waitNewSession(t, c, sid)
}

// A client that saw a newer zxid than a wiped server's is refused until
// the server's zxid passes it; a new client is not.
func TestWipeRefusesClientsThatSawNewerZxids(t *testing.T) {
	s := New()
	defer s.Close()
	old := connect(t, s, "old", time.Second)
	for i := range 5 {
		if _, err := old.Create("/n"+string(rune('a'+i)), nil, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.Wipe()
	fresh := connect(t, s, "fresh", time.Second)
	waitUntil(t, func() bool { return old.Refused() > 0 },
		func() string { return "the old client's handshake was never tried" })
	if old.State() == zk.StateHasSession {
		t.Fatal("the old client got a session from the wiped server")
	}
	for i := range 6 {
		if _, err := fresh.Create("/m"+string(rune('a'+i)), nil, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, old, zk.StateHasSession)
}

// A restore brings back the tree and the sessions of the copy: a client
// of a session in the copy keeps it, its ephemeral is back.
func TestRestoreBringsBackSessions(t *testing.T) {
	s := New()
	defer s.Close()
	c := connect(t, s, "n1", time.Second)
	if _, err := c.Create("/e", []byte("x"), zk.FlagEphemeral, nil); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if err := c.Delete("/e", -1); err != nil {
		t.Fatal(err)
	}
	s.Restore(snap)
	if _, _, ok := s.Get("/e"); !ok {
		t.Fatal("the restored copy lost its ephemeral")
	}
	// The client saw the delete's zxid, above the copy's: refused until
	// another client writes.
	other := connect(t, s, "n2", time.Second)
	if _, err := other.Create("/x", nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	sid := c.SessionID()
	waitState(t, c, zk.StateHasSession)
	if c.SessionID() != sid {
		t.Fatal("the session in the copy was not resumed")
	}
}

func TestMultiIsAllOrNothing(t *testing.T) {
	s := New()
	defer s.Close()
	c := connect(t, s, "n1", time.Second)
	if _, err := c.Create("/a", []byte("1"), 0, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Multi(&zk.SetDataRequest{Path: "/a", Data: []byte("2"), Version: 0}, &zk.CheckVersionRequest{Path: "/a", Version: 7})
	if !errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("Multi: %v, want ErrBadVersion", err)
	}
	if b, _, _ := s.Get("/a"); string(b) != "1" {
		t.Fatalf("a failed Multi applied its Set: %q", b)
	}
	_, _, w, err := c.GetW("/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Multi(&zk.CheckVersionRequest{Path: "/a", Version: 0}, &zk.SetDataRequest{Path: "/a", Data: []byte("3"), Version: 0}); err != nil {
		t.Fatal(err)
	}
	if ev := <-w; ev.Type != zk.EventNodeDataChanged {
		t.Fatalf("watch: %v", ev)
	}
}

// A paused client's operation waits for the thaw; its session expires
// meanwhile.
func TestPauseBlocksAndExpires(t *testing.T) {
	s := New()
	defer s.Close()
	c := connect(t, s, "n1", 30*time.Millisecond)
	sid := c.SessionID()
	s.SetPaused("n1", true)
	done := make(chan error, 1)
	go func() { _, _, err := c.Get("/"); done <- err }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("a paused client's Get returned: %v", err)
	default:
	}
	s.SetPaused("n1", false)
	// After the thaw the Get runs: refused while the client has no
	// session, or on the new session if the client got one first.
	if err := <-done; err != nil && !errors.Is(err, zk.ErrNoServer) {
		t.Fatalf("Get after the thaw: %v, want nil or ErrNoServer", err)
	}
	waitNewSession(t, c, sid)
}

// A killed client stays cut off when a partition of its name heals.
func TestKillOutlivesAPartitionHeal(t *testing.T) {
	s := New()
	defer s.Close()
	c := connect(t, s, "n1", 30*time.Millisecond)
	s.SetPartitioned("n1", true)
	s.Kill("n1")
	s.SetPartitioned("n1", false)
	time.Sleep(100 * time.Millisecond)
	if c.State() == zk.StateHasSession {
		t.Fatal("a killed client came back with the partition's heal")
	}
}

// A failed Multi leaves every znode it touched as it was (data, stats,
// a parent's child count and sequence counter, the zxid); a successful
// one fires the watches of what it created, changed and deleted.
func TestMultiUndoesCreatesAndDeletes(t *testing.T) {
	s := NewManual()
	c, _ := s.Connect("n1", time.Second)
	for _, p := range []string{"/p", "/p/old", "/p/set"} {
		if _, err := c.Create(p, []byte("x"), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, parent, _ := s.Get("/p")
	paths, zxid := s.Paths(), s.Zxid()
	_, err := c.Multi(&zk.CreateRequest{Path: "/p/new", Data: []byte("1")},
		&zk.CreateRequest{Path: "/p/seq-", Flags: zk.FlagSequence},
		&zk.DeleteRequest{Path: "/p/old", Version: -1},
		&zk.SetDataRequest{Path: "/p/set", Data: []byte("2"), Version: -1},
		&zk.CheckVersionRequest{Path: "/p", Version: 99})
	if !errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("Multi: %v, want ErrBadVersion", err)
	}
	if got := s.Paths(); !slices.Equal(got, paths) || s.Zxid() != zxid {
		t.Fatalf("after a failed Multi: %v at zxid %x, want %v at %x", got, s.Zxid(), paths, zxid)
	}
	if b, st, _ := s.Get("/p/set"); string(b) != "x" || st.Version != 0 {
		t.Fatalf("/p/set %q version %d after a failed Multi", b, st.Version)
	}
	if _, st, _ := s.Get("/p"); st != parent {
		t.Fatalf("parent stat %+v, want %+v", st, parent)
	}
	if got, _ := c.Create("/p/seq-", nil, zk.FlagSequence, nil); got != "/p/seq-0000000000" {
		t.Fatalf("sequence after a failed Multi: %s", got)
	}

	_, _, deleted, _ := c.GetW("/p/old")
	_, _, kids, _ := c.ChildrenW("/p")
	_, _, changed, _ := c.GetW("/p/set")
	if _, err := c.Multi(&zk.CreateRequest{Path: "/p/new", Data: []byte("1")},
		&zk.DeleteRequest{Path: "/p/old", Version: -1},
		&zk.SetDataRequest{Path: "/p/set", Data: []byte("2"), Version: -1}); err != nil {
		t.Fatal(err)
	}
	for ch, want := range map[<-chan zk.Event]zk.EventType{deleted: zk.EventNodeDeleted, kids: zk.EventNodeChildrenChanged, changed: zk.EventNodeDataChanged} {
		if ev := <-ch; ev.Type != want {
			t.Fatalf("watch %v, want %v", ev.Type, want)
		}
	}
	if _, _, ok := s.Get("/p/new"); !ok {
		t.Fatal("the created node is missing")
	}
}
