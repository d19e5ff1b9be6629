package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"
)

// A DSN may name several servers of one database, for Galera (any member
// takes writes) or for a primary and the servers it may fail over to:
//
//	user:pass@tcp(10.0.0.1:3306,10.0.0.2:3306,10.0.0.3:3306)/idgen
//
// The driver knows one address per DSN, so the store dials itself: every
// new connection goes to the first member that accepts it, in the order
// given, skipping for a while a member whose server said it cannot serve
// (a Galera member that is not synced, checked when the connection is
// opened). A node whose member dies keeps serving through the next one
// within one connect timeout.

// tcpList matches the address list of a DSN: "@tcp(" ... ")".
var tcpList = regexp.MustCompile(`@tcp\(([^)]*)\)`)

// splitMembers returns dsn with only its first member, and the members
// when it names more than one.
func splitMembers(dsn string) (string, []string, error) {
	m := tcpList.FindStringSubmatchIndex(dsn)
	if m == nil {
		return dsn, nil, nil
	}
	list := dsn[m[2]:m[3]]
	if !strings.Contains(list, ",") {
		return dsn, nil, nil
	}
	var members []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return "", nil, fmt.Errorf("mysqlstore: DSN member %q: want host:port (%v)", a, err)
		}
		members = append(members, a)
	}
	return dsn[:m[2]] + members[0] + dsn[m[3]:], members, nil
}

// memberDialer dials the members in order.
type memberDialer struct {
	members []string
	timeout time.Duration

	mu      sync.Mutex
	avoid   map[string]time.Time // member -> not before
	current string               // the member of the last connection
}

// avoidFor is how long a member that refused service is skipped.
const avoidFor = 5 * time.Second

func newMemberDialer(members []string, timeout time.Duration) *memberDialer {
	return &memberDialer{members: members, timeout: timeout, avoid: map[string]time.Time{}}
}

// dial is the driver's DialFunc: the first member that connects, in order,
// members avoided last (they may be all that is left).
func (d *memberDialer) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	d.mu.Lock()
	now := time.Now()
	var order, later []string
	for _, m := range d.members {
		if now.Before(d.avoid[m]) {
			later = append(later, m)
		} else {
			order = append(order, m)
		}
	}
	d.mu.Unlock()
	var errs []error
	for _, m := range append(order, later...) {
		dctx, cancel := context.WithTimeout(ctx, d.timeout)
		c, err := (&net.Dialer{}).DialContext(dctx, "tcp", m)
		cancel()
		if err == nil {
			d.mu.Lock()
			d.current = m
			d.mu.Unlock()
			return &memberConn{Conn: c, member: m}, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// refuse makes dial skip member for avoidFor.
func (d *memberDialer) refuse(member string) {
	d.mu.Lock()
	d.avoid[member] = time.Now().Add(avoidFor)
	d.mu.Unlock()
}

// memberConn remembers which member a connection went to.
type memberConn struct {
	net.Conn
	member string
}
