package mysqllease

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idgen/idgen/worker"
)

// Workers lists the held slots of the lease's cluster (one IDC, or all
// when idc is -1): what the server's ListWorkers RPC returns.
func (l *Lease) Workers(ctx context.Context, idc int) ([]worker.WorkerInfo, error) {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	return ListWorkers(cctx, l.cfg.DB, l.cfg.Cluster, idc)
}

// ListWorkers returns the slots of cluster that have a holder (of one IDC,
// or all when idc is -1), sorted by IDC and node, in the worker package's
// type so that tools show them like ZooKeeper's members:
//
//   - Member and Session: the holder's instance id;
//   - SlotHeld: the lease has not expired (false: the holder stopped
//     heartbeating, e.g. crashed or cut off; the slot is free for others);
//   - HighWater: the slot's mark; HeartbeatAge: the database's now minus
//     the last write, both in the database's clock; ClockOffset: the
//     holder's clock minus the database's at its last heartbeat (off by
//     the one-way latency).
func ListWorkers(ctx context.Context, db *sql.DB, cluster string, idc int) ([]worker.WorkerInfo, error) {
	m, err := readMeta(ctx, db, cluster)
	if err != nil {
		return nil, err
	}
	q := `SELECT idc, node, holder, host, port, pid, version, started_at_ms, lease_until_ms, high_water_ms, heartbeat_ms, clock_offset_ms, ` +
		dbNowMs + ` FROM worker_slot WHERE cluster = ? AND holder IS NOT NULL`
	args := []any{cluster}
	if idc >= 0 {
		q += ` AND idc = ?`
		args = append(args, idc)
	}
	rows, err := db.QueryContext(ctx, q+` ORDER BY idc, node`, args...)
	if err != nil {
		return nil, fmt.Errorf("list worker_slot of cluster %q: %w", cluster, noSchema(err))
	}
	defer rows.Close()
	var out []worker.WorkerInfo
	for rows.Next() {
		var (
			w                                      worker.WorkerInfo
			holder                                 string
			started, until, hw, beat, offMs, dbNow int64
		)
		if err := rows.Scan(&w.IDC, &w.Node, &holder, &w.Host, &w.Port, &w.PID, &w.Version, &started, &until, &hw, &beat, &offMs, &dbNow); err != nil {
			return nil, err
		}
		w.Worker = m.Worker(w.IDC, w.Node)
		w.Member, w.Session = holder, holder
		w.StartedAt = time.UnixMilli(started).UTC()
		w.SlotHeld = until >= dbNow
		w.HighWater = hw
		w.HasHeartbeat = true
		w.HeartbeatAge = time.Duration(dbNow-beat) * time.Millisecond
		w.ClockOffset = time.Duration(offMs) * time.Millisecond
		out = append(out, w)
	}
	return out, rows.Err()
}
