package zkfake

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// drain returns the session states queued on ev.
func drain(ev <-chan zk.Event) []zk.State {
	var out []zk.State
	for {
		select {
		case e := <-ev:
			out = append(out, e.State)
		default:
			return out
		}
	}
}

// A NewManual client has its session at Connect; a disconnect lasts (no
// loop), Reconnect resumes the same session, and no session expires by
// itself.
func TestManualDisconnectReconnectResumes(t *testing.T) {
	s := NewManual()
	c, ev := s.Connect("a", time.Millisecond)
	if c.State() != zk.StateHasSession {
		t.Fatalf("state %v at Connect", c.State())
	}
	if z := s.Zxid(); z>>32 != 0 {
		t.Fatalf("zxid %x: a manual server starts in epoch 0", z)
	}
	sid := c.SessionID()
	drain(ev)
	c.Disconnect()
	time.Sleep(10 * time.Millisecond) // past the session timeout: nothing runs
	if _, _, err := c.Get("/"); !errors.Is(err, zk.ErrNoServer) {
		t.Fatalf("Get while disconnected: %v", err)
	}
	c.Reconnect()
	if c.State() != zk.StateHasSession || c.SessionID() != sid {
		t.Fatalf("state %v session %x, want the session %x resumed", c.State(), c.SessionID(), sid)
	}
	want := []zk.State{zk.StateDisconnected, zk.StateConnecting, zk.StateConnected, zk.StateHasSession}
	if got := drain(ev); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestRefuseHandshakesPlaysClosedHandshakes(t *testing.T) {
	s := NewManual()
	c, ev := s.Connect("a", time.Second)
	drain(ev)
	c.RefuseHandshakes(2)
	want := []zk.State{zk.StateDisconnected, zk.StateConnecting, zk.StateConnected, zk.StateDisconnected,
		zk.StateConnecting, zk.StateConnected, zk.StateDisconnected}
	if got := drain(ev); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if c.Refused() != 2 || c.State() == zk.StateHasSession {
		t.Fatalf("refused %d, state %v", c.Refused(), c.State())
	}
}

// Renew: the client learns its session expired and gets a new one; the
// old ephemerals go, or stay for DropEphemerals with keepEphemerals.
func TestRenewReplacesTheSession(t *testing.T) {
	for _, keep := range []bool{false, true} {
		s := NewManual()
		c, ev := s.Connect("a", time.Second)
		if _, err := c.Create("/e", nil, zk.FlagEphemeral, nil); err != nil {
			t.Fatal(err)
		}
		drain(ev)
		old := c.Renew(keep)
		if c.SessionID() == old || c.State() != zk.StateHasSession {
			t.Fatalf("keep=%v: session %x state %v after Renew of %x", keep, c.SessionID(), c.State(), old)
		}
		want := []zk.State{zk.StateDisconnected, zk.StateExpired, zk.StateDisconnected, zk.StateConnected, zk.StateHasSession}
		if got := drain(ev); !slices.Equal(got, want) {
			t.Fatalf("keep=%v: events %v, want %v", keep, got, want)
		}
		if _, st, ok := s.Get("/e"); ok != keep || (keep && st.EphemeralOwner != old) {
			t.Fatalf("keep=%v: ephemeral present %v", keep, ok)
		}
		s.DropEphemerals(old)
		if _, _, ok := s.Get("/e"); ok {
			t.Fatal("DropEphemerals left the ephemeral")
		}
	}
}

// DropEphemerals leaves the session: the client resumes it.
func TestDropEphemeralsKeepsTheSession(t *testing.T) {
	s := NewManual()
	c, _ := s.Connect("a", time.Second)
	if _, err := c.Create("/e", nil, zk.FlagEphemeral, nil); err != nil {
		t.Fatal(err)
	}
	sid := c.SessionID()
	c.Disconnect()
	s.DropEphemerals(sid)
	c.Reconnect()
	if c.SessionID() != sid || c.State() != zk.StateHasSession {
		t.Fatalf("session %x state %v, want %x resumed", c.SessionID(), c.State(), sid)
	}
	if _, _, ok := s.Get("/e"); ok {
		t.Fatal("the ephemeral is still there")
	}
}

func TestHoldHandshakesAndNotServing(t *testing.T) {
	s := NewManual()
	a, _ := s.Connect("a", time.Second)
	s.SetHoldHandshakes(true)
	s.SetNotServing(true)
	b, _ := s.Connect("b", time.Second)
	if b.State() == zk.StateHasSession || b.Refused() != 0 {
		t.Fatalf("a held handshake: state %v, refused %d", b.State(), b.Refused())
	}
	if a.State() != zk.StateHasSession {
		t.Fatal("holding handshakes cost a live session")
	}
	if st := s.Stats(); len(st) != 1 || st[0].Serving {
		t.Fatalf("stats %+v while not serving", st)
	}
	s.Handshake()
	if b.State() == zk.StateHasSession {
		t.Fatal("a handshake went through while held")
	}
	s.SetHoldHandshakes(false)
	s.SetNotServing(false)
	s.Handshake()
	if b.State() != zk.StateHasSession || s.Conns() != 2 {
		t.Fatalf("state %v, %d clients", b.State(), s.Conns())
	}
	if st := s.Stats(); !st[0].Serving {
		t.Fatalf("stats %+v", st)
	}
	b.Close()
	if !b.Closed() || a.Closed() {
		t.Fatal("Closed")
	}
}

// The hook runs before each operation, outside the lock (it may call
// another client); fail refuses the operation unapplied.
func TestHookAndFail(t *testing.T) {
	s := NewManual()
	a, _ := s.Connect("a", time.Second)
	b, _ := s.Connect("b", time.Second)
	var ops []string
	s.SetHook(func(c *Conn, op, p string) {
		ops = append(ops, c.Name()+":"+op+":"+p)
		if c == a && op == "create" {
			if _, err := b.Create("/first", nil, 0, nil); err != nil {
				t.Error(err)
			}
		}
	})
	if _, err := a.Create("/x", nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	s.SetHook(nil)
	want := []string{"a:create:/x", "b:create:/first"}
	if !slices.Equal(ops, want) {
		t.Fatalf("hooked %v, want %v", ops, want)
	}
	boom := errors.New("boom")
	s.SetFail(func(c *Conn, op, p string) error {
		if op == "set" {
			return boom
		}
		return nil
	})
	if _, err := a.Set("/x", []byte("1"), -1); !errors.Is(err, boom) {
		t.Fatalf("Set: %v", err)
	}
	if b, _, _ := s.Get("/x"); len(b) != 0 {
		t.Fatal("a failed Set applied")
	}
	s.SetFail(nil)
	_, _, w, err := a.GetW("/x")
	if err != nil {
		t.Fatal(err)
	}
	s.Put("/x", []byte("2"))
	if ev := <-w; ev.Type != zk.EventNodeDataChanged {
		t.Fatalf("watch %v", ev)
	}
	if _, st, _ := s.Get("/x"); st.Version != 1 {
		t.Fatalf("version %d after Put", st.Version)
	}
}

func TestSetNowStampsZnodes(t *testing.T) {
	s := NewManual()
	at := time.UnixMilli(1_234_567)
	s.SetNow(func() time.Time { return at })
	c, _ := s.Connect("a", time.Second)
	if _, err := c.Create("/t", nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, st, _ := s.Get("/t"); st.Ctime != at.UnixMilli() || st.Mtime != at.UnixMilli() {
		t.Fatalf("ctime %d mtime %d, want %d", st.Ctime, st.Mtime, at.UnixMilli())
	}
}

func TestRestoreTreeAndWipeTreeKeepSessions(t *testing.T) {
	s := NewManual()
	c, _ := s.Connect("a", time.Second)
	if _, err := c.Create("/a", nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if _, err := c.Create("/b", nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	before := s.Zxid()
	s.RestoreTree(snap, false)
	if _, _, ok := s.Get("/b"); ok || s.Zxid() >= before || c.State() != zk.StateHasSession {
		t.Fatalf("silent restore: /b present %v, zxid %x (was %x), state %v", ok, s.Zxid(), before, c.State())
	}
	s.RestoreTree(snap, true)
	if s.Zxid() <= before || s.Zxid()>>32 != 1 {
		t.Fatalf("restore in a new epoch: zxid %x, was %x", s.Zxid(), before)
	}
	sid := c.SessionID()
	s.WipeTree()
	if p := s.Paths(); len(p) != 1 || s.Zxid() != 0 || c.SessionID() != sid || c.State() != zk.StateHasSession {
		t.Fatalf("wiped tree %v zxid %x; session %x state %v", p, s.Zxid(), c.SessionID(), c.State())
	}
}

// A lagging client reads the copy until its first write.
func TestReadFromUntilAWrite(t *testing.T) {
	s := NewManual()
	c, _ := s.Connect("a", time.Second)
	snap := s.Snapshot()
	if _, err := c.Create("/n", []byte("x"), 0, nil); err != nil {
		t.Fatal(err)
	}
	c.ReadFrom(snap)
	if ok, _, err := c.Exists("/n"); err != nil || ok {
		t.Fatalf("lagging Exists: %v %v", ok, err)
	}
	if kids, _, _ := c.Children("/"); len(kids) != 0 {
		t.Fatalf("lagging children %v", kids)
	}
	if _, err := c.Create("/m", nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if b, _, err := c.Get("/n"); err != nil || string(b) != "x" {
		t.Fatalf("after a write: %q %v", b, err)
	}
}
