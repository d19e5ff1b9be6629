package mysqlstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestDurabilityVerdict(t *testing.T) {
	for _, c := range []struct {
		d    Durability
		safe bool
		want []string // in String()
	}{
		{Durability{FlushLogAtTrxCommit: 1, SyncBinlog: 0, LogBin: false}, true, []string{"crash-safe", "log_bin=OFF"}},
		{Durability{FlushLogAtTrxCommit: 1, SyncBinlog: 1, LogBin: true}, true, []string{"crash-safe"}},
		{Durability{FlushLogAtTrxCommit: 3, SyncBinlog: 1, LogBin: true}, true, []string{"crash-safe"}},
		{Durability{FlushLogAtTrxCommit: 1, SyncBinlog: 100, LogBin: false}, true, []string{"crash-safe"}},
		{Durability{FlushLogAtTrxCommit: 2, SyncBinlog: 1, LogBin: true}, false,
			[]string{"NOT crash-safe", "innodb_flush_log_at_trx_commit=2", "SET GLOBAL innodb_flush_log_at_trx_commit=1", "my.cnf"}},
		{Durability{FlushLogAtTrxCommit: 0, SyncBinlog: 0, LogBin: false}, false, []string{"innodb_flush_log_at_trx_commit=0"}},
		{Durability{FlushLogAtTrxCommit: 1, SyncBinlog: 0, LogBin: true}, false,
			[]string{"sync_binlog=0 with the binary log on", "SET GLOBAL sync_binlog=1"}},
		{Durability{FlushLogAtTrxCommit: 1, SyncBinlog: 1000, LogBin: true}, false, []string{"sync_binlog=1000"}},
		{Durability{FlushLogAtTrxCommit: 2, SyncBinlog: 0, LogBin: true}, false,
			[]string{"innodb_flush_log_at_trx_commit=2", "sync_binlog=0"}},
	} {
		if got := c.d.Safe(); got != c.safe {
			t.Errorf("%+v: Safe() = %v, want %v", c.d, got, c.safe)
		}
		s := c.d.String()
		for _, w := range c.want {
			if !strings.Contains(s, w) {
				t.Errorf("%+v: String() = %q, missing %q", c.d, s, w)
			}
		}
		if c.safe && strings.Contains(s, "NOT") {
			t.Errorf("%+v: safe verdict %q", c.d, s)
		}
	}
}

func TestParseDurability(t *testing.T) {
	for _, c := range []struct {
		flush, sync, bin string
		want             Durability
		err              bool
	}{
		{"1", "0", "0", Durability{1, 0, false}, false},
		{"1", "1", "1", Durability{1, 1, true}, false},
		{"2", "0", "ON", Durability{2, 0, true}, false},
		{"1", "0", "OFF", Durability{1, 0, false}, false},
		{"x", "0", "0", Durability{}, true},
		{"1", "", "0", Durability{}, true},
		{"1", "0", "maybe", Durability{}, true},
	} {
		got, err := parseDurability(c.flush, c.sync, c.bin)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("parseDurability(%q, %q, %q) = %+v, %v; want %+v, err %v", c.flush, c.sync, c.bin, got, err, c.want, c.err)
		}
	}
}

// Open's rule, with the values injected: unsafe and not accepted is
// refused naming both variables and the flag; accepted is logged at error
// level and recorded.
func TestOpenDurabilityRule(t *testing.T) {
	unsafe := Durability{FlushLogAtTrxCommit: 2, SyncBinlog: 0, LogBin: true}
	s := &Store{cfg: Config{}.withDefaults(), log: zap.NewNop()}
	err := s.acceptDurability(unsafe)
	if !errors.Is(err, ErrUnsafeDurability) {
		t.Fatalf("unsafe server accepted without the flag: %v", err)
	}
	for _, w := range []string{"innodb_flush_log_at_trx_commit", "sync_binlog", "--mysql-accept-unsafe-durability", "SET GLOBAL"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not name %q", err, w)
		}
	}

	core, logs := observer.New(zapcore.DebugLevel)
	s = &Store{cfg: Config{AcceptUnsafeDurability: true}.withDefaults(), log: zap.New(core)}
	if err := s.acceptDurability(unsafe); err != nil {
		t.Fatalf("accepted risk refused: %v", err)
	}
	if s.Durability() != unsafe {
		t.Fatalf("Durability() = %+v", s.Durability())
	}
	if got := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); got != 1 {
		t.Fatalf("%d error logs for an accepted unsafe server, want 1", got)
	}

	core, logs = observer.New(zapcore.DebugLevel)
	s = &Store{cfg: Config{}.withDefaults(), log: zap.New(core)}
	if err := s.acceptDurability(Durability{FlushLogAtTrxCommit: 1}); err != nil || logs.Len() != 0 {
		t.Fatalf("safe server: %v, %d logs", err, logs.Len())
	}
}

// Open reads the real server's settings; the test server is crash-safe
// under the rule (innodb_flush_log_at_trx_commit=1, binary log off).
func TestIntegration_OpenReadsDurability(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	s := openStore(t, dsn, nil)
	var want Durability
	var bin int
	if err := s.DB().QueryRowContext(context.Background(), `SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin`).
		Scan(&want.FlushLogAtTrxCommit, &want.SyncBinlog, &bin); err != nil {
		t.Fatal(err)
	}
	want.LogBin = bin == 1
	if got := s.Durability(); got != want {
		t.Fatalf("Durability() = %+v, server says %+v", got, want)
	}
	if !want.Safe() {
		t.Logf("the test server is not crash-safe: %s", want)
	}
	d, err := CheckDurabilityDSN(testCtx(t), dsn)
	if err != nil || d != want {
		t.Fatalf("CheckDurabilityDSN = %+v, %v", d, err)
	}
}
