package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// plainNextIDs calls NextIDs with the Apache Thrift library's binary
// protocol over the given transport, writing and reading the structs by
// hand as any non-Kitex client would. It returns the ranges, or the
// IdgenError code when the server answered with the exception.
func plainNextIDs(t *testing.T, trans thrift.TTransport, biz string, channel, count int32) ([][2]int64, int32) {
	t.Helper()
	ctx := context.Background()
	p := thrift.NewTBinaryProtocolConf(trans, &thrift.TConfiguration{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.WriteMessageBegin(ctx, "NextIDs", thrift.CALL, 7))
	must(p.WriteStructBegin(ctx, "NextIDs_args"))
	must(p.WriteFieldBegin(ctx, "req", thrift.STRUCT, 1))
	must(p.WriteStructBegin(ctx, "NextIDsRequest"))
	must(p.WriteFieldBegin(ctx, "biz", thrift.STRING, 1))
	must(p.WriteString(ctx, biz))
	must(p.WriteFieldEnd(ctx))
	must(p.WriteFieldBegin(ctx, "channel", thrift.I32, 2))
	must(p.WriteI32(ctx, channel))
	must(p.WriteFieldEnd(ctx))
	must(p.WriteFieldBegin(ctx, "count", thrift.I32, 3))
	must(p.WriteI32(ctx, count))
	must(p.WriteFieldEnd(ctx))
	must(p.WriteFieldStop(ctx))
	must(p.WriteStructEnd(ctx))
	must(p.WriteFieldEnd(ctx))
	must(p.WriteFieldStop(ctx))
	must(p.WriteStructEnd(ctx))
	must(p.WriteMessageEnd(ctx))
	must(p.Flush(ctx))

	name, typ, seq, err := p.ReadMessageBegin(ctx)
	must(err)
	if name != "NextIDs" || typ != thrift.REPLY || seq != 7 {
		t.Fatalf("reply header %q %v %d", name, typ, seq)
	}
	var ranges [][2]int64
	var code int32
	_, err = p.ReadStructBegin(ctx)
	must(err)
	for {
		_, ft, id, err := p.ReadFieldBegin(ctx)
		must(err)
		if ft == thrift.STOP {
			break
		}
		switch id {
		case 0: // success: NextIDsResponse
			_, _ = p.ReadStructBegin(ctx)
			for {
				_, ft, fid, err := p.ReadFieldBegin(ctx)
				must(err)
				if ft == thrift.STOP {
					break
				}
				if fid != 1 {
					must(thrift.SkipDefaultDepth(ctx, p, ft))
					continue
				}
				_, n, err := p.ReadListBegin(ctx)
				must(err)
				for range n {
					var r [2]int64
					_, _ = p.ReadStructBegin(ctx)
					for {
						_, ft, rid, err := p.ReadFieldBegin(ctx)
						must(err)
						if ft == thrift.STOP {
							break
						}
						v, err := p.ReadI64(ctx)
						must(err)
						r[rid-1] = v
					}
					must(p.ReadStructEnd(ctx))
					ranges = append(ranges, r)
				}
				must(p.ReadListEnd(ctx))
			}
			must(p.ReadStructEnd(ctx))
		case 1: // IdgenError
			_, _ = p.ReadStructBegin(ctx)
			for {
				_, ft, fid, err := p.ReadFieldBegin(ctx)
				must(err)
				if ft == thrift.STOP {
					break
				}
				if fid == 1 {
					code, err = p.ReadI32(ctx)
					must(err)
					continue
				}
				must(thrift.SkipDefaultDepth(ctx, p, ft))
			}
			must(p.ReadStructEnd(ctx))
		default:
			must(thrift.SkipDefaultDepth(ctx, p, ft))
		}
	}
	must(p.ReadMessageEnd(ctx))
	return ranges, code
}

// TestE2E_PlainApacheThriftClients: framed and buffered binary clients
// built on the Apache Thrift library call the Kitex server on the same port
// as TTHeader clients.
func TestE2E_PlainApacheThriftClients(t *testing.T) {
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	cfg := &thrift.TConfiguration{ConnectTimeout: 2 * time.Second, SocketTimeout: 5 * time.Second}
	for _, tc := range []struct {
		name string
		wrap func(thrift.TTransport) thrift.TTransport
	}{
		{"framed", func(s thrift.TTransport) thrift.TTransport { return thrift.NewTFramedTransportConf(s, cfg) }},
		{"buffered", func(s thrift.TTransport) thrift.TTransport { return thrift.NewTBufferedTransport(s, 4096) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := thrift.NewTSocketConf(node.RPCAddr, cfg)
			trans := tc.wrap(sock)
			if err := trans.Open(); err != nil {
				t.Fatal(err)
			}
			defer trans.Close()
			ranges, code := plainNextIDs(t, trans, "plain", int32(idl.Channel_SNOWFLAKE), 5)
			if code != 0 || len(ranges) == 0 || ranges[0][1]-ranges[0][0]+1 != 5 {
				t.Fatalf("ranges %v code %d", ranges, code)
			}
			// count 0 means 1; channel 3 (SLOW_ORDERED) is ORDERED's strict
			// sequence (plainNextIDs sends no sub_key, so the refusal names it).
			ranges, code = plainNextIDs(t, trans, "plain", int32(idl.Channel_UNORDERED), 0)
			if code != 0 || len(ranges) != 1 || ranges[0][0] != ranges[0][1] {
				t.Fatalf("count 0: ranges %v code %d, want one ID", ranges, code)
			}
			_, code = plainNextIDs(t, trans, "plain", int32(idl.Channel_SLOW_ORDERED), 1)
			if code != int32(idl.ErrorCode_INVALID_ARGUMENT) {
				t.Fatalf("channel 3 without sub_key: code %d, want INVALID_ARGUMENT (as ORDERED)", code)
			}
			// The exception reaches a plain client as a decodable struct.
			_, code = plainNextIDs(t, trans, "bad name", 2, 1)
			if code != int32(idl.ErrorCode_INVALID_ARGUMENT) {
				t.Fatalf("code %d, want INVALID_ARGUMENT", code)
			}
		})
	}
}

// TestE2E_FrameSizeLimit: a frame above max_frame_bytes is refused without
// hurting the server.
func TestE2E_FrameSizeLimit(t *testing.T) {
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--max-frame-bytes", "65536"}})
	conn, err := net.DialTimeout("tcp", node.RPCAddr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sock := thrift.NewTSocketFromConnConf(conn, &thrift.TConfiguration{SocketTimeout: 5 * time.Second})
	framed := thrift.NewTFramedTransportConf(sock, &thrift.TConfiguration{MaxFrameSize: 64 << 20})
	// A 1 MiB business name: the frame is far over the limit.
	if served := sendOnce(framed, strings.Repeat("x", 1<<20)); served {
		t.Errorf("an oversized frame was served")
	}
	framed.Close()
	c := node.Client(t)
	if _, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "after", Count: 1}); err != nil {
		t.Fatalf("server unhealthy after an oversized frame: %v", err)
	}
}

// sendOnce sends one NextIDs call and reports whether the server answered
// (false: it closed the connection).
func sendOnce(trans thrift.TTransport, biz string) bool {
	ctx := context.Background()
	p := thrift.NewTBinaryProtocolConf(trans, &thrift.TConfiguration{})
	_ = p.WriteMessageBegin(ctx, "NextIDs", thrift.CALL, 1)
	_ = p.WriteStructBegin(ctx, "a")
	_ = p.WriteFieldBegin(ctx, "req", thrift.STRUCT, 1)
	_ = p.WriteStructBegin(ctx, "r")
	_ = p.WriteFieldBegin(ctx, "biz", thrift.STRING, 1)
	_ = p.WriteString(ctx, biz)
	_ = p.WriteFieldEnd(ctx)
	_ = p.WriteFieldStop(ctx)
	_ = p.WriteStructEnd(ctx)
	_ = p.WriteFieldEnd(ctx)
	_ = p.WriteFieldStop(ctx)
	_ = p.WriteStructEnd(ctx)
	_ = p.WriteMessageEnd(ctx)
	if err := p.Flush(ctx); err != nil {
		return false
	}
	_, _, _, err := p.ReadMessageBegin(ctx)
	return err == nil
}
