package mysqldb

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/segment"
)

// MySQL/MariaDB server error numbers the store treats specially.
const (
	ErDupEntry           = 1062
	ErNoSuchTable        = 1146
	ErBadField           = 1054 // unknown column (a schema older than the code)
	ErDataOutOfRange     = 1690 // BIGINT value is out of range
	ErLockWaitTimeout    = 1205
	ErLockDeadlock       = 1213
	ErConCount           = 1040 // too many connections
	ErServerShutdown     = 1053
	ErAccessDenied       = 1045
	ErDBAccessDenied     = 1044
	ErTableAccessDenied  = 1142
	ErColumnAccessDenied = 1143
	ErBadDB              = 1049
	ErQueryInterrupted   = 1317
	ErOptionPreventsStmt = 1290 // --read-only
	ErReadOnlyTxn        = 1792
	ErReadOnlyMode       = 1836
	ErConnectionKilled   = 1927 // MariaDB
	ErStatementTimeout   = 1969 // MariaDB max_statement_time
	ErQueryTimeout       = 3024 // MySQL max_execution_time
	ErClientIdleTimeout  = 4031 // MySQL 8.0.24+: disconnected for inactivity
	ErNetReadError       = 1158
	ErNetReadInterrupted = 1159
	ErNetWriteError      = 1160
	ErNetWriteInterrupt  = 1161
	ErHostBlocked        = 1129
	ErUserLimitReached   = 1226
	ErUnknownComError    = 1047
	ErTooManyUserConns   = 1203
	ErLockTableFull      = 1206
	ErOutOfResources     = 1041
)

// ErrNo returns the server's error number of err, 0 when err is not a
// server error.
func ErrNo(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// Classify turns a database error into the store's error for op (a phrase
// such as `reserve segment for "order"`), wrapping segment.ErrUnavailable
// with what to check when the database cannot serve. parent is the
// caller's context, to tell the caller's cancellation from the store's own
// Timeout.
func (c *Conn) Classify(parent context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, segment.ErrUnavailable) || errors.Is(err, segment.ErrUnknownBiz) ||
		errors.Is(err, segment.ErrInvalid) || errors.Is(err, segment.ErrRequestMismatch) ||
		errors.Is(err, segment.ErrExhausted) || errors.Is(err, segment.ErrBizExists) {
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	return ClassifyErr(parent, op, err, c.Addr, c.Timeout)
}

// ClassifyErr is Classify for callers without a Conn (Open's first
// statements, migrations, tools): addr and timeout name the server and
// the bound of the call in the hints.
func ClassifyErr(parent context.Context, op string, err error, addr string, timeout time.Duration) error {
	unavailable := func(hint string) error {
		return fmt.Errorf("mysqlstore: %s: %s: %w: %w", op, hint, segment.ErrUnavailable, err)
	}
	switch n := ErrNo(err); n {
	case 0:
	case ErLockWaitTimeout:
		return unavailable("lock wait timed out (another transaction holds the row; look for long-running ones in information_schema.innodb_trx)")
	case ErLockDeadlock:
		return unavailable("deadlock, rolled back")
	case ErDataOutOfRange:
		return fmt.Errorf("mysqlstore: %s: the counter would pass 2^63-1: %w: %w", op, segment.ErrExhausted, err)
	case ErNoSuchTable:
		return unavailable("schema missing (run `idctl db migrate --mysql DSN`)")
	case ErBadDB:
		return unavailable("database does not exist (check the DSN's database name; `idctl db migrate` does not create databases)")
	case ErAccessDenied, ErDBAccessDenied, ErTableAccessDenied, ErColumnAccessDenied:
		return unavailable("access denied (check the DSN's user and password and the GRANT in segment/mysqlstore/README.md)")
	case ErConCount, ErTooManyUserConns, ErUserLimitReached, ErHostBlocked, ErOutOfResources, ErLockTableFull:
		return unavailable(fmt.Sprintf("server at %s refuses more work (check max_connections, the user's limits and the pool size across nodes)", addr))
	case ErServerShutdown, ErConnectionKilled, ErQueryInterrupted, ErNetReadError, ErNetReadInterrupted,
		ErNetWriteError, ErNetWriteInterrupt, ErClientIdleTimeout, ErUnknownComError:
		return unavailable(fmt.Sprintf("connection to %s lost (server shutting down or restarted?)", addr))
	case ErOptionPreventsStmt, ErReadOnlyTxn, ErReadOnlyMode:
		return unavailable(fmt.Sprintf("server at %s is read-only (a replica or a demoted primary? check the DSN points at the primary)", addr))
	case ErStatementTimeout, ErQueryTimeout:
		return unavailable("statement timed out on the server")
	default:
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		if parent.Err() != nil {
			return unavailable("caller's deadline passed")
		}
		return unavailable(fmt.Sprintf("no answer from %s within %v (check the server is up and reachable, lock waits, and whether the connection pool is exhausted)", addr, timeout))
	case errors.Is(err, context.Canceled):
		return unavailable("canceled")
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return unavailable(fmt.Sprintf("cannot reach MySQL at %s (check the server is running and the DSN's address)", addr))
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &ne) || errors.As(err, &oe) {
		return unavailable(fmt.Sprintf("cannot reach MySQL at %s (check the server is running and the DSN's address)", addr))
	}
	return fmt.Errorf("mysqlstore: %s: %w", op, err)
}

// IsDeadlock reports a transaction rolled back by a deadlock or a Galera
// certification conflict (both error 1213).
func IsDeadlock(err error) bool { return ErrNo(err) == ErLockDeadlock }

// IsDupEntry reports an insert refused by a duplicate key.
func IsDupEntry(err error) bool { return ErrNo(err) == ErDupEntry }
