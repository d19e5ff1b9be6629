// Package freeport picks loopback TCP ports for the servers the tests and
// the fault suite start (idgen nodes, MariaDB, ZooKeeper), and tells
// whether a port is held by the process it was handed to.
//
// The usual trick, listen on 127.0.0.1:0 and close, returns a port from the
// kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
// default): the same range every outgoing connection gets its local port
// from. Between the close and the server's bind, any client socket of any
// process on the machine (a node's connection to ZooKeeper or MariaDB, a
// load generator's call) can be given that port, and the server then exits
// with "address already in use"; :0 may also return a port this process
// handed out a moment ago. Picked here, a port lies outside the ephemeral
// range, where the kernel never puts a client socket; it is drawn at
// random (two processes picking at once rarely collide), checked free by
// binding it, and never handed out twice by one process. A collision with
// another process's server remains possible: callers still check that the
// process they started holds its port (HeldBy) and retry on a busy one.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// RangeFile is where Linux keeps the ephemeral range ("lo\thi\n").
const RangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Linux's default ephemeral range, used when RangeFile cannot be read.
const (
	DefaultEphemeralLo = 32768
	DefaultEphemeralHi = 60999
)

// Bounds of the ports Pick draws from, outside the ephemeral range: below
// minPort are the well-known and registered ports of services a machine
// may run (MariaDB's 3306, ZooKeeper's 2181, 8080...), which the bind
// check would skip anyway but which are likelier to be taken.
const (
	minPort = 10000
	maxPort = 65535
	// minPool is the fewest ports outside the ephemeral range worth
	// drawing from; with fewer (an ephemeral range that covers nearly
	// everything), Pick draws from minPort-maxPort whole, as a port
	// outside it could run out and the bind check and the callers' retry
	// still hold.
	minPool = 1000
	// tries bounds the candidates Pick binds before giving up.
	tries = 200
)

// ErrNoPort is returned when no free port was found.
var ErrNoPort = errors.New("freeport: no free loopback port found")

// Picker hands out ports; its zero value is not usable, see New. Safe for
// concurrent use.
type Picker struct {
	lo, hi int // the pool: [lo, hi] minus [elo, ehi]
	elo    int
	ehi    int
	free   func(port int) bool // true if the port can be bound now

	mu     sync.Mutex
	handed map[int]bool
}

// New returns a Picker that avoids the ephemeral range [elo, ehi] and draws
// from [minPort, maxPort] otherwise; free reports whether a port can be
// bound (nil: bind 127.0.0.1:port and close).
func New(elo, ehi int, free func(int) bool) *Picker {
	if free == nil {
		free = canBind
	}
	p := &Picker{lo: minPort, hi: maxPort, elo: elo, ehi: ehi, free: free, handed: map[int]bool{}}
	if p.poolSize() < minPool {
		p.elo, p.ehi = 0, -1 // nothing excluded
	}
	return p
}

// excluded returns the part of the ephemeral range inside [lo, hi]
// (xlo > xhi: none).
func (p *Picker) excluded() (xlo, xhi int) {
	return max(p.elo, p.lo), min(p.ehi, p.hi)
}

// poolSize is the number of ports in [lo, hi] outside [elo, ehi].
func (p *Picker) poolSize() int {
	n := p.hi - p.lo + 1
	if xlo, xhi := p.excluded(); xlo <= xhi {
		n -= xhi - xlo + 1
	}
	return n
}

// nth returns the i-th port of the pool (0 <= i < poolSize), in order.
func (p *Picker) nth(i int) int {
	port := p.lo + i
	if xlo, xhi := p.excluded(); xlo <= xhi && port >= xlo {
		port += xhi - xlo + 1
	}
	return port
}

// Pick returns a port outside the ephemeral range that this Picker has not
// returned before and that could be bound a moment ago.
func (p *Picker) Pick() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.poolSize()
	for range tries {
		port := p.nth(rand.IntN(n))
		if p.handed[port] || !p.free(port) {
			continue
		}
		p.handed[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("%w in %d tries (pool %d-%d without %d-%d, %d handed out)", ErrNoPort, tries, p.lo, p.hi, p.elo, p.ehi, len(p.handed))
}

// canBind reports whether 127.0.0.1:port can be listened on now.
func canBind(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// EphemeralRange reads the kernel's ephemeral range from RangeFile, or
// returns Linux's default when it cannot be read or parsed.
func EphemeralRange() (lo, hi int) {
	b, err := os.ReadFile(RangeFile)
	if err != nil {
		return DefaultEphemeralLo, DefaultEphemeralHi
	}
	return parseRange(string(b))
}

// parseRange parses "lo hi" (any white space), with Linux's default for
// anything else.
func parseRange(s string) (lo, hi int) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return DefaultEphemeralLo, DefaultEphemeralHi
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi > maxPort || lo > hi {
		return DefaultEphemeralLo, DefaultEphemeralHi
	}
	return lo, hi
}

var (
	defaultOnce   sync.Once
	defaultPicker *Picker
)

// Pick returns a port from the process's Picker (the machine's ephemeral
// range avoided): every caller in one process shares it, so no port is
// handed out twice.
func Pick() (int, error) {
	defaultOnce.Do(func() {
		lo, hi := EphemeralRange()
		defaultPicker = New(lo, hi, nil)
	})
	return defaultPicker.Pick()
}
