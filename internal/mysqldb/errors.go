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

	"github.com/idgen/idgen/internal/mysqlerr"
	"github.com/idgen/idgen/segment"
)

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
	switch n := mysqlerr.Number(err); n {
	case 0:
	case mysqlerr.LockWaitTimeout:
		return unavailable("lock wait timed out (another transaction holds the row; look for long-running ones in information_schema.innodb_trx)")
	case mysqlerr.LockDeadlock:
		return unavailable("deadlock, rolled back")
	case mysqlerr.DataOutOfRange:
		return fmt.Errorf("mysqlstore: %s: the counter would pass 2^63-1: %w: %w", op, segment.ErrExhausted, err)
	case mysqlerr.NoSuchTable:
		return unavailable("schema missing (run `idctl db migrate --mysql DSN`)")
	case mysqlerr.BadDB:
		return unavailable("database does not exist (check the DSN's database name; `idctl db migrate` does not create databases)")
	case mysqlerr.AccessDenied, mysqlerr.DBAccessDenied, mysqlerr.TableAccessDenied, mysqlerr.ColumnAccessDenied:
		return unavailable("access denied (check the DSN's user and password and the GRANT in segment/mysqlstore/README.md)")
	case mysqlerr.ConCount, mysqlerr.TooManyUserConns, mysqlerr.UserLimitReached, mysqlerr.HostBlocked, mysqlerr.OutOfResources, mysqlerr.LockTableFull:
		return unavailable(fmt.Sprintf("server at %s refuses more work (check max_connections, the user's limits and the pool size across nodes)", addr))
	case mysqlerr.ServerShutdown, mysqlerr.ConnectionKilled, mysqlerr.QueryInterrupted, mysqlerr.NetReadError, mysqlerr.NetReadInterrupted,
		mysqlerr.NetWriteError, mysqlerr.NetWriteInterrupt, mysqlerr.ClientIdleTimeout, mysqlerr.UnknownComError:
		return unavailable(fmt.Sprintf("connection to %s lost (server shutting down or restarted?)", addr))
	case mysqlerr.OptionPreventsStmt, mysqlerr.ReadOnlyTxn, mysqlerr.ReadOnlyMode:
		return unavailable(fmt.Sprintf("server at %s is read-only (a replica or a demoted primary? check the DSN points at the primary)", addr))
	case mysqlerr.StatementTimeout, mysqlerr.QueryTimeout:
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
func IsDeadlock(err error) bool { return mysqlerr.Number(err) == mysqlerr.LockDeadlock }

// IsDupEntry reports an insert refused by a duplicate key.
func IsDupEntry(err error) bool { return mysqlerr.Number(err) == mysqlerr.DupEntry }
