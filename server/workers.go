package server

import (
	"context"
	"os"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/worker"
)

// workersFunc answers ListWorkers. With --zk it reads ZooKeeper, the same
// listing 'idctl workers' prints, over the lease's own session (no extra
// session per call); with --mysql alone it reads the worker_slot table. A
// standalone node reports itself.
func workersFunc(cfg Config, lease worker.Lease, port int) func(context.Context, int) ([]*idl.Worker, error) {
	// lister is a lease that can list every node's slot: the ZooKeeper
	// lease (member znodes) and the MySQL lease (the worker_slot table).
	type lister interface {
		Workers(ctx context.Context, idc int) ([]worker.WorkerInfo, error)
	}
	zl, ok := lease.(lister)
	if !ok {
		return func(ctx context.Context, idc int) ([]*idl.Worker, error) {
			s, ok := lease.Slot()
			if !ok || (idc >= 0 && idc != s.IDC) {
				return nil, nil
			}
			return []*idl.Worker{{Idc: int32(s.IDC), Node: int32(s.Node), Worker: int32(s.Worker), Host: advertiseHost(cfg),
				Port: int32(port), Pid: int32(os.Getpid()), Version: version, StartedAtMs: started.UnixMilli(),
				HeartbeatMs: s.HighWater, Member: "standalone"}}, nil
		}
	}
	return func(ctx context.Context, idc int) ([]*idl.Worker, error) {
		ws, err := zl.Workers(ctx, idc)
		if err != nil {
			return nil, err
		}
		out := make([]*idl.Worker, len(ws))
		for i, w := range ws {
			out[i] = &idl.Worker{Idc: int32(w.IDC), Node: int32(w.Node), Worker: int32(w.Worker), Host: w.Host,
				Port: int32(w.Port), Pid: int32(w.PID), Version: w.Version, StartedAtMs: w.StartedAt.UnixMilli(),
				HeartbeatMs: w.HighWater, HeartbeatAgeMs: w.HeartbeatAge.Milliseconds(),
				ClockOffsetMs: w.ClockOffset.Milliseconds(), Member: w.Member}
		}
		return out, nil
	}
}
