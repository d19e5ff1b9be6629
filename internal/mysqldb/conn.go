// Package mysqldb is what the two MySQL stores of idgen share: the segment
// store (segment/mysqlstore: businesses, UNORDERED segments, the
// per-request ORDERED path, the barrier's repairs) and the ORDERED owners'
// epoch-fenced store (ordered/mysqlstore), which lives on the same rows
// and the same connection pool. Both run their statements through one
// Conn (a call's time bound, the conflict retry, the error
// classification), write the same ORDERED tables and request rows, and
// sessions bounded by one idle limit; the code of each lives here once.
//
// It is internal: the public API of either store does not grow by it.
package mysqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// Conn is a store's connection pool with what every call on it needs.
// segment/mysqlstore builds it at Open; ordered/mysqlstore uses the same
// one (segment/mysqlstore's Store.Conn), so the two stores of a node share
// one pool and one conflict counter.
type Conn struct {
	DB      *sql.DB
	Log     *zap.Logger   // never nil
	Addr    string        // host:port, for messages
	Timeout time.Duration // the bound of one call (mysqlstore.Config.Timeout)
	// MultiStatements: the pool's connections accept several statements
	// in one Exec (the driver's multiStatements), so ExecJoined joins
	// them into one round trip.
	MultiStatements bool

	conflicts atomic.Uint64 // RetryConflicts' retries
}

// OpContext bounds one store call by Timeout.
func (c *Conn) OpContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.Timeout)
}

// ErrRequestVanished: the request row that blocked an insert was gone
// when it was read (cleaned up in between); RetryConflicts tries again.
var ErrRequestVanished = errors.New("request id row vanished")

// SessionIdleLimit is the wait_timeout of the store's sessions: the
// server ends a session idle for this long, rolling back its open
// transaction and freeing its row locks. Every statement of the store is
// bounded by timeout, so a session idle for longer belongs to a client
// that stopped: a paused or frozen process. Without the limit, a paused
// ORDERED owner's transaction holds its shard's fence row for as long as
// the pause lasts (up to the server's wait_timeout, 8 hours by default),
// and every successor's Claim fails with a lock wait timeout meanwhile
// (issue 29, hole j). wait_timeout is the one limit both supported
// servers have: MariaDB's idle_transaction_timeout has no MySQL 8
// counterpart, and a claimant that KILLs the holder found in
// information_schema would need the PROCESS privilege and could kill the
// wrong session. Ending a paused owner's session is safe because every
// owner write is fenced by its epoch: the owner, once resumed, finds its
// transaction gone, and its retry is refused under the successor's epoch.
func SessionIdleLimit(timeout time.Duration) time.Duration {
	return max(5*time.Second, (2 * timeout).Round(time.Second))
}

// Now is the timestamp written to created_at/updated_at columns.
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// OrderedTable returns the name of the ORDERED table for a shard index.
func OrderedTable(shard int) string {
	return fmt.Sprintf("ordered_%02d", shard)
}

// Batch bounds the rows (or request ids, or keys) of one statement, well
// inside max_allowed_packet for the longest sub keys.
const Batch = 500

// ownerColumnChars is the width of the owner label columns
// (ordered_shard.owner, cluster_binding.bound_by), in characters.
const ownerColumnChars = 255

// OwnerColumn fits owner (an RPC address or node name, for operators
// only) into an owner label column: valid UTF-8, at most 255 characters.
// A claim or a binding never fails over its label.
func OwnerColumn(owner string) string {
	owner = strings.ToValidUTF8(owner, "\uFFFD")
	if utf8.RuneCountInString(owner) <= ownerColumnChars {
		return owner
	}
	r := []rune(owner)
	return string(r[:ownerColumnChars])
}

// Stmt is one statement with its arguments.
type Stmt struct {
	SQL  string
	Args []any
}

// RequestInserts builds the INSERTs of reqs into ordered_request, Batch
// rows per statement, stamped at; suffix ends each statement ("" fails on
// a stored id, as an owner's persist must; the barrier's repair ignores
// stored ones). The row format is the per-request path's (ReserveOrdered),
// so each path replays the other's ids.
func RequestInserts(reqs []ordered.Request, at any, suffix string) []Stmt {
	var out []Stmt
	for len(reqs) > 0 {
		n := min(len(reqs), Batch)
		var b strings.Builder
		b.WriteString("INSERT INTO ordered_request (biz, request_id, sub_key, `count`, `first`, `last`, created_at) VALUES ")
		args := make([]any, 0, 7*n)
		for i, q := range reqs[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, q.Biz, []byte(segment.StoredRequestID(q.Scope, q.ID)), []byte(q.SubKey), q.Count, q.Range.First, q.Range.Last, at)
		}
		b.WriteString(suffix)
		out = append(out, Stmt{SQL: b.String(), Args: args})
		reqs = reqs[n:]
	}
	return out
}

// joinedBytes bounds the SQL and arguments ExecJoined sends in one Exec,
// well under the server's max_allowed_packet (16 MiB by default on
// MariaDB, 64 MiB on MySQL 8): a larger one would fail, or make the
// driver fall back to a server-side prepare, which refuses several
// statements.
const joinedBytes = 1 << 20

// Execer is a *sql.Tx or *sql.DB.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ExecJoined runs stmts in order on ex, in as few round trips as the pool
// allows: joined with ";" into Execs of at most joinedBytes when the
// connections accept several statements (MultiStatements), one Exec each
// otherwise. The server stops at the first statement that fails, and that
// error is returned (so a caller inside a transaction rolls it back, as
// after a single statement's failure). res is the last Exec's result: its
// RowsAffected is the last statement's (the driver's rule for several
// statements).
func (c *Conn) ExecJoined(ctx context.Context, ex Execer, stmts []Stmt) (res sql.Result, err error) {
	for len(stmts) > 0 {
		n, size := 1, stmtBytes(stmts[0])
		if c.MultiStatements {
			for n < len(stmts) && size+stmtBytes(stmts[n]) <= joinedBytes {
				size += stmtBytes(stmts[n])
				n++
			}
		}
		q, args := stmts[0].SQL, stmts[0].Args
		if n > 1 {
			var b strings.Builder
			args = nil
			for i, st := range stmts[:n] {
				if i > 0 {
					b.WriteString(";\n")
				}
				b.WriteString(st.SQL)
				args = append(args, st.Args...)
			}
			q = b.String()
		}
		if res, err = ex.ExecContext(ctx, q, args...); err != nil {
			return nil, err
		}
		stmts = stmts[n:]
	}
	return res, nil
}

// stmtBytes estimates the size of st once interpolated: its SQL and each
// argument escaped (at most twice its length) and quoted.
func stmtBytes(st Stmt) int {
	n := len(st.SQL) + 2
	for _, a := range st.Args {
		switch v := a.(type) {
		case string:
			n += 2*len(v) + 2
		case []byte:
			n += 2*len(v) + 3
		default:
			n += 24
		}
	}
	return n
}
