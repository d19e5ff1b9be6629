package server

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"runtime"
	"slices"
	"testing"

	gthrift "github.com/cloudwego/gopkg/protocol/thrift"
	"github.com/cloudwego/kitex/pkg/remote"
	kthrift "github.com/cloudwego/kitex/pkg/remote/codec/thrift"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/serviceinfo"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// Frames as clients put them on the wire. msg is a Thrift binary message
// (header and arguments struct).

func bufferedFrame(msg []byte) []byte { return slices.Clone(msg) }

func framedFrame(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
}

// ttheaderFrame wraps msg in a TTHeader with an empty key-value section
// (protocol binary, no transforms), with an inner frame when framed.
func ttheaderFrame(msg []byte, framed bool) []byte {
	if framed {
		msg = framedFrame(msg)
	}
	header := []byte{0, 0, 0, 0} // protocol binary, no transforms, padding
	b := binary.BigEndian.AppendUint32(nil, uint32(10+len(header)+len(msg)))
	b = append(b, 0x10, 0x00, 0, 0)         // magic, flags
	b = binary.BigEndian.AppendUint32(b, 1) // seq id
	b = binary.BigEndian.AppendUint16(b, uint16(len(header)/4))
	b = append(b, header...)
	return append(b, msg...)
}

// thriftMessage is a CALL message header for method and seq id 1,
// followed by body.
func thriftMessage(method string, body []byte) []byte {
	b := make([]byte, gthrift.Binary.MessageBeginLength(method))
	gthrift.Binary.WriteMessageBegin(b, method, gthrift.CALL, 1)
	return append(b, body...)
}

// hugeListFrame is the attack of issue 30: a CreateBiz whose req.plugins
// (field 13, list<string>) claims 2^31-1 elements and holds none, framed:
// 46 bytes.
func hugeListFrame() []byte {
	body := []byte{tSTRUCT, 0, 1, // args.req
		tSTRING, 0, 1, 0, 0, 0, 1, 'x', // req.name = "x"
		tLIST, 0, 13, tSTRING, 0x7f, 0xff, 0xff, 0xff, // req.plugins: 2^31-1 strings
		tSTOP, tSTOP}
	return framedFrame(thriftMessage("CreateBiz", body))
}

// hugeNameMessage is a message header whose method name claims 2^31-1
// bytes, followed by a few.
func hugeNameMessage() []byte {
	b := binary.BigEndian.AppendUint32(nil, thriftVersion1|uint32(gthrift.CALL))
	b = binary.BigEndian.AppendUint32(b, 0x7fffffff)
	return append(b, "NextIDs"...)
}

// validMessages are a well-formed call of every RPC of the service, with
// every request struct present (empty), plus a CreateBiz with plugins.
func validMessages(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, mi := range idgensvc.NewServiceInfo().Methods {
		args := mi.NewArgs()
		v := reflect.ValueOf(args).Elem()
		for i := range v.NumField() {
			if f := v.Field(i); f.Kind() == reflect.Pointer && f.IsNil() && f.CanSet() {
				f.Set(reflect.New(f.Type().Elem()))
			}
		}
		fc := args.(gthrift.FastCodec)
		body := make([]byte, fc.BLength())
		fc.FastWriteNocopy(body, nil)
		out[name] = thriftMessage(name, body)
	}
	args := idgensvc.NewServiceInfo().Methods["CreateBiz"].NewArgs().(*idl.IDGenServiceCreateBizArgs)
	args.Req = &idl.CreateBizRequest{Name: "b", Plugins: []string{"audit", "stats"}}
	body := make([]byte, args.BLength())
	args.FastWriteNocopy(body, nil)
	out["CreateBiz+plugins"] = thriftMessage("CreateBiz", body)
	return out
}

// transports put a message on the wire in each way clients send it.
var transports = map[string]func([]byte) []byte{
	"buffered":        bufferedFrame,
	"framed":          framedFrame,
	"ttheader":        func(m []byte) []byte { return ttheaderFrame(m, false) },
	"ttheader-framed": func(m []byte) []byte { return ttheaderFrame(m, true) },
}

// bytesPeeker is a peeker over a byte slice, as the connection's buffer
// would be with everything received.
type bytesPeeker []byte

func (b bytesPeeker) Peek(n int) ([]byte, error) {
	if n > len(b) {
		return nil, errors.New("EOF: peek past the end of the input")
	}
	return b[:n], nil
}

func reasonOf(err error) string {
	var fe *frameCheckErr
	if errors.As(err, &fe) {
		return fe.reason
	}
	if err != nil {
		return "read: " + err.Error()
	}
	return ""
}

// TestCheckRequestValid: a well-formed call of every RPC passes on every
// transport.
func TestCheckRequestValid(t *testing.T) {
	for name, msg := range validMessages(t) {
		for tr, wrap := range transports {
			if err := checkRequest(bytesPeeker(wrap(msg)), 1<<20); err != nil {
				t.Errorf("%s over %s refused: %v", name, tr, err)
			}
		}
	}
}

// TestCheckRequestRefuses: each declared length larger than what its frame
// holds is refused before anything is decoded, as are frames over the
// limit, deep nesting and other protocols.
func TestCheckRequestRefuses(t *testing.T) {
	nested := []byte{}
	for range 100 {
		nested = append(nested, tSTRUCT, 0, 1)
	}
	nested = append(nested, make([]byte, 101)...) // the stops
	mapFrame := []byte{tSTRUCT, 0, 1, tMAP, 0, 9, tSTRING, tI64, 0x10, 0, 0, 0, tSTOP, tSTOP}
	setFrame := []byte{tSTRUCT, 0, 1, tSET, 0, 9, tI64, 0, 1, 0, 0, tSTOP, tSTOP}
	stringFrame := []byte{tSTRUCT, 0, 1, tSTRING, 0, 1, 0x7f, 0xff, 0xff, 0xff, 'x', tSTOP, tSTOP}
	innerTooLong := ttheaderFrame(framedFrame(thriftMessage("NextIDs", []byte{tSTOP})), false)
	// The inner frame of a TTHeaderFramed request claims more than the
	// outer frame holds.
	binary.BigEndian.PutUint32(innerTooLong[18:], 1<<19)
	cases := []struct {
		name   string
		frame  []byte
		reason string
	}{
		{"the 46-byte list frame", hugeListFrame(), rejectDeclared},
		{"the list frame over TTHeader", ttheaderFrame(hugeListFrame()[4:], true), rejectDeclared},
		{"the list frame unframed", hugeListFrame()[4:], rejectTooLarge},
		{"a 2^31-1-byte method name, framed", framedFrame(hugeNameMessage()), rejectDeclared},
		{"a 2^31-1-byte method name, unframed", hugeNameMessage(), rejectTooLarge},
		{"a 2^31-1-byte method name, TTHeader", ttheaderFrame(hugeNameMessage(), false), rejectDeclared},
		{"a 2^31-1-byte string", framedFrame(thriftMessage("NextIDs", stringFrame)), rejectDeclared},
		{"a map of 2^28 entries", framedFrame(thriftMessage("NextIDs", mapFrame)), rejectDeclared},
		{"a set of 65536 i64", framedFrame(thriftMessage("NextIDs", setFrame)), rejectDeclared},
		{"a negative list size", framedFrame(thriftMessage("NextIDs", []byte{tLIST, 0, 1, tI32, 0xff, 0xff, 0xff, 0xff, tSTOP})), rejectMalformed},
		{"a framed length over the limit", append(binary.BigEndian.AppendUint32(nil, 1<<20), 0x80, 1, 0, 1), rejectTooLarge},
		{"a TTHeader length over the limit", append(binary.BigEndian.AppendUint32(nil, 1<<30), 0x10, 0, 0, 0), rejectTooLarge},
		{"an inner frame longer than the TTHeader frame", innerTooLong, rejectDeclared},
		{"100 nested structs", framedFrame(thriftMessage("NextIDs", nested)), rejectNesting},
		{"an unknown type", framedFrame(thriftMessage("NextIDs", []byte{99, 0, 1, tSTOP})), rejectMalformed},
		{"HTTP", []byte("GET / HTTP/1.1\r\n\r\n"), rejectProtocol},
		{"a non-strict message", framedFrame(append([]byte{0, 0, 0, 7}, "NextIDs"...)), rejectProtocol},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := checkRequest(bytesPeeker(c.frame), 1<<20)
			runtime.ReadMemStats(&after)
			if got := reasonOf(err); got != c.reason {
				t.Errorf("refused for %q (%v), want %q", got, err, c.reason)
			}
			if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
				t.Errorf("the check allocated %d bytes", d)
			}
		})
	}
}

// TestCheckRequestPeeksOnlyWhatItNeeds: an unframed request is read as
// far as the walk needs and no further (a peek past the message would wait
// for bytes the client never sends), and a framed one never past its frame.
func TestCheckRequestPeeksOnlyWhatItNeeds(t *testing.T) {
	msg := validMessages(t)["CreateBiz+plugins"]
	for tr, wrap := range transports {
		frame := wrap(msg)
		// The next request follows at once: nothing may read into it.
		p := &countingPeeker{b: append(slices.Clone(frame), wrap(msg)...)}
		if err := checkRequest(p, 1<<20); err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		if p.most > len(frame) {
			t.Errorf("%s: peeked %d bytes of a %d-byte request", tr, p.most, len(frame))
		}
	}
}

type countingPeeker struct {
	b    []byte
	most int
}

func (p *countingPeeker) Peek(n int) ([]byte, error) {
	p.most = max(p.most, n)
	return bytesPeeker(p.b).Peek(n)
}

// decodeServerSide decodes frame with the server's codec as Kitex's server
// handler would, and returns the decoding error.
func decodeServerSide(c remote.Codec, frame []byte) error {
	svc := idgensvc.NewServiceInfo()
	ctx := remote.WithServiceSearcher(context.Background(), oneService{svc})
	ri := rpcinfo.NewRPCInfo(rpcinfo.EmptyEndpointInfo(), rpcinfo.EmptyEndpointInfo(),
		rpcinfo.NewServerInvocation(), rpcinfo.NewRPCConfig(), rpcinfo.NewRPCStats())
	msg := remote.NewMessage(nil, ri, remote.Call, remote.Server)
	msg.SetPayloadCodec(kthrift.NewThriftCodec())
	defer msg.Recycle()
	in := remote.NewReaderBuffer(frame)
	defer in.Release(nil)
	return c.Decode(ctx, msg, in)
}

type oneService struct{ svc *serviceinfo.ServiceInfo }

func (s oneService) SearchService(string, string, bool, serviceinfo.PayloadCodec) *serviceinfo.ServiceInfo {
	return s.svc
}

func testCodec(t testing.TB) (remote.Codec, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	c, err := newServerCodec(1<<20, reg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// TestServerCodec: the server's codec decodes every valid request on
// every transport, and refuses the attack frames (counting them) without
// allocating for what they declare.
func TestServerCodec(t *testing.T) {
	c, reg := testCodec(t)
	for name, msg := range validMessages(t) {
		for tr, wrap := range transports {
			if err := decodeServerSide(c, wrap(msg)); err != nil {
				t.Errorf("%s over %s: %v", name, tr, err)
			}
		}
	}
	for _, frame := range [][]byte{hugeListFrame(), framedFrame(hugeNameMessage()), hugeNameMessage()} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := decodeServerSide(c, frame)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("an attack frame was decoded")
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
			t.Errorf("decoding a %d-byte frame allocated %d bytes", len(frame), d)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if got[rejectDeclared] != 2 || got[rejectTooLarge] != 1 {
		t.Errorf("idgen_rpc_frames_rejected_total = %v, want declared_length 2 and frame_too_large 1", got)
	}
}

// FuzzServerDecode feeds arbitrary bytes to the server's decode path (the
// check, then Kitex's codec and the generated decoders) and checks that it
// never panics and never allocates in proportion to a length the input
// declares: at most a fixed 4 MiB plus 64 bytes per input byte. Seeded
// with a valid call of every RPC on every transport and the attack frames.
//
//	go test ./server/ -run '^$' -fuzz FuzzServerDecode -fuzztime 30s
func FuzzServerDecode(f *testing.F) {
	for _, msg := range validMessages(f) {
		for _, wrap := range transports {
			f.Add(wrap(msg))
		}
	}
	f.Add(hugeListFrame())
	f.Add(framedFrame(hugeNameMessage()))
	f.Add(hugeNameMessage())
	f.Add(ttheaderFrame(hugeListFrame()[4:], true))
	c, _ := testCodec(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_ = decodeServerSide(c, frame)
		runtime.ReadMemStats(&after)
		if d, bound := after.TotalAlloc-before.TotalAlloc, uint64(4<<20+64*len(frame)); d > bound {
			t.Fatalf("decoding %d bytes allocated %d bytes (bound %d)", len(frame), d, bound)
		}
	})
}

// BenchmarkCheckRequest is the check's cost on the hot path: a NextIDs
// request as the client package sends it (TTHeader, framed).
func BenchmarkCheckRequest(b *testing.B) {
	args := &idl.IDGenServiceNextIDsArgs{Req: &idl.NextIDsRequest{Biz: "orders", Count: 100}}
	body := make([]byte, args.BLength())
	args.FastWriteNocopy(body, nil)
	var frame peeker = bytesPeeker(ttheaderFrame(thriftMessage("NextIDs", body), true))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkRequest(frame, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
