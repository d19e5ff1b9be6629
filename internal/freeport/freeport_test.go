package freeport

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func always(int) bool { return true }

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi int
	}{
		{"32768\t60999\n", 32768, 60999},
		{"1024 65535", 1024, 65535},
		{"49152 65535\n", 49152, 65535},
		{"", DefaultEphemeralLo, DefaultEphemeralHi},
		{"abc 1", DefaultEphemeralLo, DefaultEphemeralHi},
		{"60999 32768", DefaultEphemeralLo, DefaultEphemeralHi},
		{"0 70000", DefaultEphemeralLo, DefaultEphemeralHi},
		{"1 2 3", DefaultEphemeralLo, DefaultEphemeralHi},
	} {
		if lo, hi := parseRange(c.in); lo != c.lo || hi != c.hi {
			t.Errorf("parseRange(%q) = %d, %d; want %d, %d", c.in, lo, hi, c.lo, c.hi)
		}
	}
}

// The pool is exactly [minPort, maxPort] minus the ephemeral range,
// whatever side of the bounds the range lies on.
func TestPoolIsOutsideEphemeral(t *testing.T) {
	for _, c := range [][2]int{
		{32768, 60999},  // Linux
		{49152, 65535},  // IANA, BSDs: nothing above
		{1024, 20000},   // below minPort partly
		{1024, 4999},    // below minPort wholly
		{9000, 11000},   // straddles minPort
		{10000, 50000},  // starts at minPort
		{30000, 30000},  // one port
		{12000, 64000},  // leaves fewer than minPool: nothing excluded
		{1024, 65535},   // covers all: nothing excluded
		{65000, 65535},  // at the top
		{20000, 100000}, // (parseRange refuses it; New copes)
	} {
		p := New(c[0], c[1], always)
		want := map[int]bool{}
		for port := minPort; port <= maxPort; port++ {
			if port < c[0] || port > c[1] {
				want[port] = true
			}
		}
		if len(want) < minPool {
			for port := minPort; port <= maxPort; port++ {
				want[port] = true
			}
		}
		if n := p.poolSize(); n != len(want) {
			t.Errorf("range %v: pool of %d ports, want %d", c, n, len(want))
			continue
		}
		got := map[int]bool{}
		for i := range p.poolSize() {
			port := p.nth(i)
			if !want[port] || got[port] {
				t.Errorf("range %v: nth(%d) = %d: outside the pool or repeated", c, i, port)
				break
			}
			got[port] = true
		}
	}
}

func TestPickAvoidsEphemeralAndNeverRepeats(t *testing.T) {
	p := New(32768, 60999, always)
	seen := map[int]bool{}
	for range 5000 {
		port, err := p.Pick()
		if err != nil {
			t.Fatal(err)
		}
		if port < minPort || port > maxPort || (port >= 32768 && port <= 60999) {
			t.Fatalf("Pick() = %d: inside the ephemeral range or out of bounds", port)
		}
		if seen[port] {
			t.Fatalf("Pick() returned %d twice", port)
		}
		seen[port] = true
	}
}

func TestPickSkipsBusyPorts(t *testing.T) {
	busy := func(port int) bool { return port%2 == 0 }
	p := New(32768, 60999, func(port int) bool { return !busy(port) })
	for range 1000 {
		port, err := p.Pick()
		if err != nil {
			t.Fatal(err)
		}
		if busy(port) {
			t.Fatalf("Pick() = %d, a port that could not be bound", port)
		}
	}
	none := New(32768, 60999, func(int) bool { return false })
	if _, err := none.Pick(); !errors.Is(err, ErrNoPort) {
		t.Fatalf("Pick() with every port busy: %v, want ErrNoPort", err)
	}
}

// The process's Picker: outside the machine's ephemeral range, bindable,
// and a port it returned is not returned again even once free.
func TestPick(t *testing.T) {
	lo, hi := EphemeralRange()
	seen := map[int]bool{}
	for range 50 {
		port, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if New(lo, hi, always).poolSize() >= minPool && port >= lo && port <= hi {
			t.Fatalf("Pick() = %d, inside the ephemeral range %d-%d", port, lo, hi)
		}
		if seen[port] {
			t.Fatalf("Pick() returned %d twice", port)
		}
		seen[port] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d from Pick() cannot be bound: %v", port, err)
		}
		l.Close()
	}
}

func TestListenInodes(t *testing.T) {
	text := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:2710 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 20 4 30 10 -1
   2: 00000000:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 100 0 0 10 0
   3: 0100007F:2711 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 444 1 0000000000000000 100 0 0 10 0
   4: 0100007F:12710 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 555 1 0000000000000000 100 0 0 10 0
`
	got := listenInodes(text, 10000) // 0x2710
	if len(got) != 2 || got[0] != "111" || got[1] != "333" {
		t.Fatalf("listenInodes(port 10000) = %v, want [111 333] (listeners only, that port only)", got)
	}
}

func TestHeldBy(t *testing.T) {
	port, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	if held, err := HeldBy(os.Getpid(), port); err != nil || held {
		t.Fatalf("HeldBy before the listen = %v, %v; want false", held, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	if held, err := HeldBy(os.Getpid(), port); err != nil || !held {
		t.Fatalf("HeldBy(this process) while it listens = %v, %v; want true", held, err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if held, err := AddrsHeldBy(os.Getpid(), addr, l.Addr().String()); err != nil || !held {
		t.Fatalf("AddrsHeldBy(this process, %s) = %v, %v; want true", addr, held, err)
	}
	// Another process does not hold this process's port: what the fault
	// suite relies on when something else answers on a node's port.
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Skip("sleep:", err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if held, err := HeldBy(other.Process.Pid, port); err != nil || held {
		t.Fatalf("HeldBy(another process) = %v, %v; want false", held, err)
	}
	if held, err := AddrsHeldBy(other.Process.Pid, addr); err != nil || held {
		t.Fatalf("AddrsHeldBy(another process) = %v, %v; want false", held, err)
	}
	l.Close()
	if held, err := HeldBy(os.Getpid(), port); err != nil || held {
		t.Fatalf("HeldBy after the close = %v, %v; want false", held, err)
	}
	if held, err := HeldBy(1<<30, port); err != nil || held {
		t.Fatalf("HeldBy(no such process) = %v, %v; want false, nil", held, err)
	}
}
