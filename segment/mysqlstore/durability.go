package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idgen/idgen/internal/mysqldb"
)

// Durability is what the server says about keeping committed transactions
// across a crash. Every reservation (a segment, an ORDERED range, a worker
// slot's high-water mark) is a promise that the numbers below it were
// handed out; a commit the server forgets after a crash hands them out a
// second time. Open reads it (Store.Durability) and refuses an unsafe
// server unless Config.AcceptUnsafeDurability is set.
type Durability struct {
	// FlushLogAtTrxCommit is @@innodb_flush_log_at_trx_commit: 1 (and
	// MariaDB's 3) flush the redo log at every commit; 0 and 2 flush once a
	// second and lose up to a second of commits on a crash (2: on an OS
	// crash or power loss).
	FlushLogAtTrxCommit int
	// SyncBinlog is @@sync_binlog: 1 syncs the binary log at every commit.
	SyncBinlog int
	// LogBin is @@log_bin. With the binary log on, the server recovers
	// InnoDB's prepared transactions from the binary log after a crash
	// (MariaDB relies on it: with binlog on it skips one InnoDB sync per
	// commit), so an unsynced binary log loses commits even with
	// innodb_flush_log_at_trx_commit=1, and a replica may have a
	// transaction the primary forgot. With it off, sync_binlog does not
	// matter.
	LogBin bool
}

// Safe reports whether a commit survives a crash of the server or the
// machine: innodb_flush_log_at_trx_commit is 1 (or MariaDB's 3, which also
// flushes at commit) and, when the binary log is on, sync_binlog is 1.
func (d Durability) Safe() bool { return len(d.problems()) == 0 }

// problems lists what makes d unsafe, one phrase per variable.
func (d Durability) problems() []string {
	var p []string
	if d.FlushLogAtTrxCommit != 1 && d.FlushLogAtTrxCommit != 3 {
		p = append(p, fmt.Sprintf("innodb_flush_log_at_trx_commit=%d (want 1: with %d up to a second of commits is lost on a crash)",
			d.FlushLogAtTrxCommit, d.FlushLogAtTrxCommit))
	}
	if d.LogBin && d.SyncBinlog != 1 {
		p = append(p, fmt.Sprintf("sync_binlog=%d with the binary log on (want 1: crash recovery trusts the binary log, which is not synced at each commit)",
			d.SyncBinlog))
	}
	return p
}

// Fix is what an operator runs to make the server crash-safe.
const durabilityFix = "SET GLOBAL innodb_flush_log_at_trx_commit=1; SET GLOBAL sync_binlog=1; and in my.cnf under [mysqld]: innodb_flush_log_at_trx_commit=1 and sync_binlog=1"

// String is the verdict: "crash-safe (...)" or "NOT crash-safe: ..." naming
// the variables and the fix.
func (d Durability) String() string {
	vals := fmt.Sprintf("innodb_flush_log_at_trx_commit=%d, sync_binlog=%d, log_bin=%s",
		d.FlushLogAtTrxCommit, d.SyncBinlog, onOff(d.LogBin))
	if d.Safe() {
		return "crash-safe (" + vals + ")"
	}
	return "NOT crash-safe: " + strings.Join(d.problems(), "; ") +
		"; committed reservations can be lost on a crash and IDs handed out twice. Fix: " + durabilityFix
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

// ErrUnsafeDurability: the server may lose committed transactions on a
// crash and Config.AcceptUnsafeDurability is not set.
var ErrUnsafeDurability = errors.New("MySQL server is not crash-safe")

// AcceptUnsafeFlag is the idgen command-line flag that sets
// Config.AcceptUnsafeDurability, named in Open's refusal.
const AcceptUnsafeFlag = "--mysql-accept-unsafe-durability"

// checkDurability is Open's verdict on d: nil when safe or accepted (the
// caller logs the accepted risk), else ErrUnsafeDurability with the fix.
func checkDurability(d Durability, accept bool) error {
	if d.Safe() || accept {
		return nil
	}
	return fmt.Errorf("%w: %s. Refusing to start; to run anyway (IDs may repeat after a database crash) pass %s (Config.AcceptUnsafeDurability)",
		ErrUnsafeDurability, d, AcceptUnsafeFlag)
}

// queryer is what readDurability needs of *sql.DB or *sql.Conn.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ReadDurability reads the server's durability settings over db.
func ReadDurability(ctx context.Context, db *sql.DB) (Durability, error) {
	return readDurability(ctx, db)
}

func readDurability(ctx context.Context, q queryer) (Durability, error) {
	var fs, ss, ls sql.NullString
	if err := q.QueryRowContext(ctx, `SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin`).Scan(&fs, &ss, &ls); err != nil {
		return Durability{}, fmt.Errorf("read durability settings: %w", err)
	}
	return parseDurability(fs.String, ss.String, ls.String)
}

// parseDurability turns the three variables as the server returns them
// (numbers; log_bin as 0/1 or OFF/ON) into a Durability.
func parseDurability(flush, syncBinlog, logBin string) (Durability, error) {
	var d Durability
	var err error
	if d.FlushLogAtTrxCommit, err = strconv.Atoi(strings.TrimSpace(flush)); err != nil {
		return d, fmt.Errorf("innodb_flush_log_at_trx_commit is %q, not a number", flush)
	}
	if d.SyncBinlog, err = strconv.Atoi(strings.TrimSpace(syncBinlog)); err != nil {
		return d, fmt.Errorf("sync_binlog is %q, not a number", syncBinlog)
	}
	switch strings.ToUpper(strings.TrimSpace(logBin)) {
	case "1", "ON":
		d.LogBin = true
	case "0", "OFF", "":
	default:
		return d, fmt.Errorf("log_bin is %q, want 0/1 or OFF/ON", logBin)
	}
	return d, nil
}

// CheckDurabilityDSN opens dsn and reads its durability settings (for
// `idctl db check`).
func CheckDurabilityDSN(ctx context.Context, dsn string) (Durability, error) {
	db, mc, err := openDB(dsn, DefaultTimeout)
	if err != nil {
		return Durability{}, err
	}
	defer db.Close()
	d, err := readDurability(ctx, db)
	if err != nil {
		return d, mysqldb.ClassifyErr(ctx, "read durability settings from "+redactedDSN(mc), err, mc.Addr, DefaultTimeout)
	}
	return d, nil
}
