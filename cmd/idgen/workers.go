package main

import (
	"context"
	"os"
	"strings"

	"github.com/idgen/idgen/issuer"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/worker"
)

// workersFunc answers ListWorkers. In cluster mode it reads ZooKeeper, as
// 'idctl workers' does, over a short-lived session: the call is rare (an
// operator's) and must not share fate with the lease's own session. A
// standalone node reports itself.
func workersFunc(cfg Config, lease worker.Lease, is *issuer.Issuer, port int) func(context.Context, int) ([]*idl.Worker, error) {
	if cfg.ZK == "" {
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
		conn, err := worker.DialZK(ctx, strings.Split(cfg.ZK, ","), cfg.ZKSessionTimeout, cfg.ZKAuth, nil)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ws, err := worker.ListWorkers(ctx, conn, cfg.ZKRoot, cfg.Cluster, idc)
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
