package mysqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// Every new connection first asks the server who it is. Behind a VIP or a
// proxy, a failover moves new connections to another server, which may
// lack the last reservations (asynchronous replication). The store tells
// whoever registered with OnServerChange before the connection serves a
// single statement, so the ORDERED processor can hold reservations until
// the cluster has repaired the new server (package zkguard).
//
// A server's identity is its server_uuid (MySQL), else
// server_id@hostname:port; all members of one Galera cluster share one
// identity (galera/<wsrep_cluster_name>): moving between members loses
// nothing, certification is synchronous.

// identityConnector wraps the driver's connector.
type identityConnector struct {
	driver.Connector
	s      *Store
	dialer *memberDialer // nil: one address
}

func (c *identityConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	id, ready, err := serverIdentity(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !ready {
		conn.Close()
		if c.dialer != nil {
			c.dialer.mu.Lock()
			m := c.dialer.current
			c.dialer.mu.Unlock()
			c.dialer.refuse(m)
		}
		return nil, fmt.Errorf("%w: the Galera member is not synced (wsrep_ready=OFF); trying another member", driver.ErrBadConn)
	}
	c.s.servers.seen(id, c.s.log)
	return conn, nil
}

// serverIdentity reads the identity of the server behind conn, and
// whether it may serve (a Galera member must be ready).
func serverIdentity(ctx context.Context, conn driver.Conn) (id string, ready bool, err error) {
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		return "", true, nil
	}
	vars, err := showNameValues(ctx, q,
		"SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_id','server_uuid','hostname','port','wsrep_on','wsrep_cluster_name')")
	if err != nil {
		return "", false, err
	}
	if strings.EqualFold(vars["wsrep_on"], "ON") {
		// Only a Galera member has a readiness to check: one more round
		// trip for Galera connections, none for the others.
		st, err := showNameValues(ctx, q, "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready')")
		if err != nil {
			return "", false, err
		}
		vars["wsrep_ready"] = st["wsrep_ready"]
	}
	if strings.EqualFold(vars["wsrep_on"], "ON") {
		return "galera/" + vars["wsrep_cluster_name"], strings.EqualFold(vars["wsrep_ready"], "ON"), nil
	}
	if u := vars["server_uuid"]; u != "" {
		return "mysql/" + u, true, nil
	}
	return fmt.Sprintf("server/%s@%s:%s", vars["server_id"], vars["hostname"], vars["port"]), true, nil
}

// showNameValues runs a SHOW statement of (name, value) rows on a raw
// driver connection (database/sql's helpers need a *sql.DB).
func showNameValues(ctx context.Context, q driver.QueryerContext, stmt string) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, stmt, nil)
	if err != nil {
		return nil, fmt.Errorf("read the server's identity: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	row := make([]driver.Value, 2)
	for {
		if err := rows.Next(row); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("read the server's identity: %w", err)
		}
		out[strings.ToLower(asString(row[0]))] = asString(row[1])
	}
}

func asString(v driver.Value) string {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case string:
		return x
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// serverWatch tracks the identity of the server the store's connections
// reach.
type serverWatch struct {
	mu       sync.Mutex
	id       string // "" until the first connection
	changes  uint64
	onChange []func(old, new string)
}

// seen records the identity of a new connection's server and, when it
// differs from the last one, calls the OnServerChange functions before the
// connection is used.
func (w *serverWatch) seen(id string, log *zap.Logger) {
	w.mu.Lock()
	old := w.id
	if old == id {
		w.mu.Unlock()
		return
	}
	w.id = id
	fns := w.onChange
	if old != "" {
		w.changes++
	}
	w.mu.Unlock()
	if old == "" {
		return
	}
	log.Warn("MySQL server changed (a failover?): the new server may lack the last reservations",
		zap.String("old", old), zap.String("new", id))
	for _, fn := range fns {
		fn(old, id)
	}
}

// Server returns the identity of the server the store's last new
// connection reached ("" before the first).
func (s *Store) Server() string {
	s.servers.mu.Lock()
	defer s.servers.mu.Unlock()
	return s.servers.id
}

// ServerChanges returns how many times a new connection reached another
// server than the one before.
func (s *Store) ServerChanges() uint64 {
	s.servers.mu.Lock()
	defer s.servers.mu.Unlock()
	return s.servers.changes
}

// OnServerChange registers fn, called synchronously when a new connection
// reaches another server than the one before, before that connection
// serves any statement. fn must not block on the store.
func (s *Store) OnServerChange(fn func(old, new string)) {
	s.servers.mu.Lock()
	s.servers.onChange = append(s.servers.onChange, fn)
	s.servers.mu.Unlock()
}
