package mysqlstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// TestOpenUnreachable: no server at the address means ErrUnavailable,
// quickly, with a hint, and without the password.
func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = Open(context.Background(), Config{DSN: "idgen:s3cret@tcp(" + addr + ")/idgen", Timeout: 500 * time.Millisecond})
	if !errors.Is(err, segment.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open on a closed port: %v; want ErrUnavailable naming %s", err, addr)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Open took %v with Timeout 500ms", took)
	}
}

func TestDriverConfig(t *testing.T) {
	mc, err := driverConfig("u:pw@tcp(db:3306)/idgen?timeout=1s&innodb_lock_wait_timeout=50&parseTime=false&multiStatements=false&clientFoundRows=true", 3*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	// MultiStatements is forced on: the owners' group commit joins its
	// statements (mysqldb.Conn.ExecJoined).
	if !mc.ParseTime || !mc.InterpolateParams || mc.ClientFoundRows || !mc.MultiStatements || mc.Loc != time.UTC {
		t.Errorf("forced settings missing: %+v", mc)
	}
	if mc.Timeout != time.Second {
		t.Errorf("dial timeout %v, want the DSN's 1s", mc.Timeout)
	}
	if got := mc.Params["innodb_lock_wait_timeout"]; got != "2" {
		t.Errorf("innodb_lock_wait_timeout = %q, want 2 (half of 3s, rounded up)", got)
	}
	if d := redactedDSN(mc); strings.Contains(d, "pw") || !strings.Contains(d, "db:3306") {
		t.Errorf("redacted DSN %q", d)
	}
	for d, want := range map[time.Duration]int{100 * time.Millisecond: 1, time.Second: 1, 2 * time.Second: 1, 5 * time.Second: 3} {
		if got := lockWaitSeconds(d); got != want {
			t.Errorf("lockWaitSeconds(%v) = %d, want %d", d, got, want)
		}
	}
	if n := lockName("cleanup", strings.Repeat("x", 64)); len(n) > 64 {
		t.Errorf("lock name %q longer than 64", n)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := "u:p@tcp(h:1)/db"
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{}, "DSN"},
		{Config{DSN: "nope"}, "DSN"},
		{Config{DSN: "u:p@tcp(h:1)/"}, "DSN"},
		{Config{DSN: ok, MaxOpenConns: -1}, "MaxOpenConns"},
		{Config{DSN: ok, MaxIdleConns: -1}, "MaxIdleConns"},
		{Config{DSN: ok, ConnMaxLifetime: -1}, "ConnMaxLifetime"},
		{Config{DSN: ok, Timeout: -1}, "Timeout"},
		{Config{DSN: ok, RequestRetention: -1}, "RequestRetention"},
		{Config{DSN: ok, CleanupBatch: -1}, "CleanupBatch"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v; want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if err := (Config{DSN: ok}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	d := Config{DSN: ok}.withDefaults()
	if d.MaxOpenConns != 32 || d.MaxIdleConns != 32 || d.Timeout != 2*time.Second || d.RequestRetention != 24*time.Hour || d.Logger == nil {
		t.Errorf("defaults: %+v", d)
	}
}
