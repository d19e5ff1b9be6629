// Command noop is the RPC floor for benchmarks: a Kitex server on idgen's
// IDL, with the same transport and codec settings as idgen, whose NextIDs
// answers a constant range without touching a generator or a store.
// `idctl bench` against noop and against idgen in the same run gives the
// share of a request's cost that idgen itself adds.
//
//	noop --addr 127.0.0.1:8898
//
// Its IDs are constant, so `idctl bench --check` against it reports
// duplicates by design.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote/codec"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/server"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "noop:", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("noop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8898", "Thrift RPC listen address")
	maxFrame := fs.Int("max-frame-bytes", 1<<20, "largest Thrift frame accepted (as idgen's --max-frame-bytes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	klog.SetLevel(klog.LevelWarn)
	exit := make(chan error, 1)
	svr := idgensvc.NewServer(&noop{},
		server.WithListener(ln),
		server.WithServerBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: "idgen"}),
		server.WithCodec(codec.NewDefaultCodecWithSizeLimit(*maxFrame)),
		server.WithExitWaitTime(time.Second),
		server.WithExitSignal(func() <-chan error { return exit }),
	)
	fmt.Fprintf(stderr, "noop serving on %s (pid %d)\n", ln.Addr(), os.Getpid())
	done := make(chan error, 1)
	go func() { done <- svr.Run() }()
	select {
	case <-ctx.Done():
		exit <- nil
		return <-done
	case err := <-done:
		return err
	}
}

// noop implements the IDL with constant answers.
type noop struct{}

var _ idl.IDGenService = (*noop)(nil)

// NextIDs returns the range 1..count: no generator, no store, no lock.
func (*noop) NextIDs(_ context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
	n := int64(req.Count)
	if n < 1 {
		n = 1
	}
	ch := idl.Channel_SNOWFLAKE
	if req.Channel != nil {
		ch = *req.Channel
	}
	return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: 1, Last: n}}, Channel: ch, Count: n}, nil
}

func (*noop) ParseID(_ context.Context, req *idl.ParseIDRequest) (*idl.ParseIDResponse, error) {
	return &idl.ParseIDResponse{Id: req.Id, Time: time.UnixMilli(0).UTC().Format(time.RFC3339Nano), BelowFloor: true}, nil
}

func (*noop) Clock(context.Context, *idl.ClockRequest) (*idl.ClockResponse, error) {
	return &idl.ClockResponse{NowMs: time.Now().UnixMilli(), State: "serving", Cluster: "noop", Worker: -1, Version: "noop"}, nil
}

func (*noop) ListWorkers(context.Context, *idl.ListWorkersRequest) (*idl.ListWorkersResponse, error) {
	return &idl.ListWorkersResponse{Cluster: "noop"}, nil
}

func unsupported(op string) error {
	return &idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT, Message: "noop server: " + op + " is not supported"}
}

func (*noop) CreateBiz(context.Context, *idl.CreateBizRequest) (*idl.Biz, error) {
	return nil, unsupported("CreateBiz")
}

func (*noop) UpdateBiz(context.Context, *idl.UpdateBizRequest) (*idl.Biz, error) {
	return nil, unsupported("UpdateBiz")
}

func (*noop) GetBiz(context.Context, *idl.GetBizRequest) (*idl.Biz, error) {
	return nil, unsupported("GetBiz")
}

func (*noop) ListBiz(context.Context, *idl.ListBizRequest) (*idl.ListBizResponse, error) {
	return &idl.ListBizResponse{}, nil
}

func (*noop) CreateBizToken(context.Context, *idl.CreateBizTokenRequest) (*idl.CreateBizTokenResponse, error) {
	return nil, unsupported("CreateBizToken")
}

func (*noop) RevokeBizToken(context.Context, *idl.RevokeBizTokenRequest) (*idl.RevokeBizTokenResponse, error) {
	return nil, unsupported("RevokeBizToken")
}

func (*noop) OrderedTake(_ context.Context, req *idl.OrderedTakeRequest) (*idl.OrderedTakeResponse, error) {
	return &idl.OrderedTakeResponse{Range: &idl.IDRange{First: 1, Last: int64(max(req.Count, 1))}}, nil
}

func (*noop) OrderedOwners(context.Context, *idl.OrderedOwnersRequest) (*idl.OrderedOwnersResponse, error) {
	return &idl.OrderedOwnersResponse{}, nil
}
