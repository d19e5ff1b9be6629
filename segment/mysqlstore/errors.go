package mysqlstore

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
	erDupEntry           = 1062
	erNoSuchTable        = 1146
	erDataOutOfRange     = 1690 // BIGINT value is out of range
	erLockWaitTimeout    = 1205
	erLockDeadlock       = 1213
	erConCount           = 1040 // too many connections
	erServerShutdown     = 1053
	erAccessDenied       = 1045
	erDBAccessDenied     = 1044
	erTableAccessDenied  = 1142
	erColumnAccessDenied = 1143
	erBadDB              = 1049
	erQueryInterrupted   = 1317
	erOptionPreventsStmt = 1290 // --read-only
	erReadOnlyTxn        = 1792
	erReadOnlyMode       = 1836
	erConnectionKilled   = 1927 // MariaDB
	erStatementTimeout   = 1969 // MariaDB max_statement_time
	erQueryTimeout       = 3024 // MySQL max_execution_time
	erClientIdleTimeout  = 4031 // MySQL 8.0.24+: disconnected for inactivity
	erNetReadError       = 1158
	erNetReadInterrupted = 1159
	erNetWriteError      = 1160
	erNetWriteInterrupt  = 1161
	erHostBlocked        = 1129
	erUserLimitReached   = 1226
	erUnknownComError    = 1047
	erTooManyUserConns   = 1203
	erLockTableFull      = 1206
	erOutOfResources     = 1041
)

func mysqlErrNo(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// classify turns a database error into the store's error for op (a phrase
// such as `reserve segment for "order"`), wrapping segment.ErrUnavailable
// with what to check when the database cannot serve. parent is the
// caller's context, to tell the caller's cancellation from the store's own
// Timeout.
func (s *Store) classify(parent context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, segment.ErrUnavailable) || errors.Is(err, segment.ErrUnknownBiz) ||
		errors.Is(err, segment.ErrInvalid) || errors.Is(err, segment.ErrRequestMismatch) ||
		errors.Is(err, segment.ErrExhausted) || errors.Is(err, segment.ErrBizExists) {
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	return classifyErr(parent, op, err, s.addr, s.cfg.Timeout)
}

func classifyErr(parent context.Context, op string, err error, addr string, timeout time.Duration) error {
	unavailable := func(hint string) error {
		return fmt.Errorf("mysqlstore: %s: %s: %w: %w", op, hint, segment.ErrUnavailable, err)
	}
	switch n := mysqlErrNo(err); n {
	case 0:
	case erLockWaitTimeout:
		return unavailable("lock wait timed out (another transaction holds the row; look for long-running ones in information_schema.innodb_trx)")
	case erLockDeadlock:
		return unavailable("deadlock, rolled back")
	case erDataOutOfRange:
		return fmt.Errorf("mysqlstore: %s: the counter would pass 2^63-1: %w: %w", op, segment.ErrExhausted, err)
	case erNoSuchTable:
		return unavailable("schema missing (run `idctl db migrate --mysql DSN`)")
	case erBadDB:
		return unavailable("database does not exist (check the DSN's database name; `idctl db migrate` does not create databases)")
	case erAccessDenied, erDBAccessDenied, erTableAccessDenied, erColumnAccessDenied:
		return unavailable("access denied (check the DSN's user and password and the GRANT in segment/mysqlstore/README.md)")
	case erConCount, erTooManyUserConns, erUserLimitReached, erHostBlocked, erOutOfResources, erLockTableFull:
		return unavailable(fmt.Sprintf("server at %s refuses more work (check max_connections, the user's limits and the pool size across nodes)", addr))
	case erServerShutdown, erConnectionKilled, erQueryInterrupted, erNetReadError, erNetReadInterrupted,
		erNetWriteError, erNetWriteInterrupt, erClientIdleTimeout, erUnknownComError:
		return unavailable(fmt.Sprintf("connection to %s lost (server shutting down or restarted?)", addr))
	case erOptionPreventsStmt, erReadOnlyTxn, erReadOnlyMode:
		return unavailable(fmt.Sprintf("server at %s is read-only (a replica or a demoted primary? check the DSN points at the primary)", addr))
	case erStatementTimeout, erQueryTimeout:
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

func isDeadlock(err error) bool { return mysqlErrNo(err) == erLockDeadlock }
func isDupEntry(err error) bool { return mysqlErrNo(err) == erDupEntry }
