package mysqldb

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/internal/mysqlerr"
	"github.com/idgen/idgen/segment"
)

func TestClassify(t *testing.T) {
	myErr := func(n uint16) error { return fmt.Errorf("exec: %w", &mysql.MySQLError{Number: n, Message: "x"}) }
	tests := []struct {
		name string
		err  error
		want error  // nil: neither ErrUnavailable nor ErrExhausted
		hint string // part of the message
	}{
		{"deadline", context.DeadlineExceeded, segment.ErrUnavailable, "within 2s"},
		{"canceled", context.Canceled, segment.ErrUnavailable, "canceled"},
		{"bad conn", driver.ErrBadConn, segment.ErrUnavailable, "check the server is running"},
		{"invalid conn", mysql.ErrInvalidConn, segment.ErrUnavailable, "check the server is running"},
		{"eof", io.ErrUnexpectedEOF, segment.ErrUnavailable, "check the server is running"},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, segment.ErrUnavailable, "DSN's address"},
		{"lock wait", myErr(mysqlerr.LockWaitTimeout), segment.ErrUnavailable, "lock wait"},
		{"deadlock", myErr(mysqlerr.LockDeadlock), segment.ErrUnavailable, "deadlock"},
		{"too many connections", myErr(mysqlerr.ConCount), segment.ErrUnavailable, "max_connections"},
		{"shutdown", myErr(mysqlerr.ServerShutdown), segment.ErrUnavailable, "restarted"},
		{"read only", myErr(mysqlerr.OptionPreventsStmt), segment.ErrUnavailable, "primary"},
		{"no table", myErr(mysqlerr.NoSuchTable), segment.ErrUnavailable, "idctl db migrate"},
		{"no database", myErr(mysqlerr.BadDB), segment.ErrUnavailable, "database name"},
		{"access denied", myErr(mysqlerr.TableAccessDenied), segment.ErrUnavailable, "GRANT"},
		{"out of range", myErr(mysqlerr.DataOutOfRange), segment.ErrExhausted, "2^63-1"},
		{"syntax", myErr(1064), nil, "op"},
		{"other", errors.New("boom"), nil, "boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ClassifyErr(context.Background(), "op", tc.err, "db:3306", 2*time.Second)
			if !errors.Is(got, tc.err) {
				t.Errorf("%v does not wrap the cause %v", got, tc.err)
			}
			unavailable, exhausted := errors.Is(got, segment.ErrUnavailable), errors.Is(got, segment.ErrExhausted)
			switch {
			case tc.want == nil && (unavailable || exhausted):
				t.Errorf("%v: want neither ErrUnavailable nor ErrExhausted", got)
			case tc.want != nil && !errors.Is(got, tc.want):
				t.Errorf("%v: want %v", got, tc.want)
			}
			if !strings.Contains(got.Error(), tc.hint) {
				t.Errorf("%q does not say %q", got, tc.hint)
			}
		})
	}
	// The caller's own deadline is reported as such.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := ClassifyErr(ctx, "op", context.DeadlineExceeded, "db:3306", time.Second); !strings.Contains(got.Error(), "caller") {
		t.Errorf("caller's deadline: %v", got)
	}
}
