package server

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/clock/clocktest"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// callRPC serves one call of method through the generated service's
// handler, as Kitex does after decoding a frame, with req as the request
// (nil: a frame whose arguments struct has no request field). It returns
// the IDL exception of the answer (nil when it succeeded) and any other
// error, which Kitex would answer as an application exception.
func callRPC(t *testing.T, h *handler, method string, req func(reflect.Type) reflect.Value) (*idl.IdgenError, error) {
	t.Helper()
	mi := idgensvc.NewServiceInfo().Methods[method]
	args, result := mi.NewArgs(), mi.NewResult()
	field := reflect.ValueOf(args).Elem().FieldByName("Req")
	if !field.IsValid() {
		t.Fatalf("%s: the arguments struct %T has no Req field: the test needs updating", method, args)
	}
	if req != nil {
		field.Set(req(field.Type().Elem()))
	}
	if err := mi.Handler()(context.Background(), h, args, result); err != nil {
		return nil, err
	}
	ie, _ := reflect.ValueOf(result).Elem().FieldByName("Err").Interface().(*idl.IdgenError)
	return ie, nil
}

// rpcMethods lists the service's methods from the generated service info,
// so that an RPC added to the IDL is covered without editing the test.
func rpcMethods() []string {
	var out []string
	for name := range idgensvc.NewServiceInfo().Methods {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// TestEveryRPCEmptyRequest sends every RPC of the service with no request
// (the arguments struct without its field, which decodes to a nil
// request), with an empty request, and with an empty request carrying only
// the admin token, to a started node with admin and client tokens. Every
// answer must be typed: success or an IdgenError other than INTERNAL
// (which is what a recovered panic answers), and no handler may panic. On
// the code before this test OrderedOwners dereferenced its nil request.
func TestEveryRPCEmptyRequest(t *testing.T) {
	const adminTok, clientTok = "the-admin-token-0123456789", "the-client-token-0123456789"
	_, h, _ := startStatusNode(t, adminTok)
	h.clientToken = clientTok
	empty := func(ty reflect.Type) reflect.Value { return reflect.New(ty) }
	withToken := func(ty reflect.Type) reflect.Value {
		v := reflect.New(ty)
		if f := v.Elem().FieldByName("Token"); f.IsValid() {
			tok := adminTok
			switch f.Kind() {
			case reflect.Pointer:
				f.Set(reflect.ValueOf(&tok))
			case reflect.String:
				f.SetString(tok)
			}
		}
		return v
	}
	methods := rpcMethods()
	if len(methods) < 13 {
		t.Fatalf("the service info lists %d methods: %v", len(methods), methods)
	}
	for _, method := range methods {
		for _, c := range []struct {
			name       string
			req        func(reflect.Type) reflect.Value
			maySucceed bool
		}{{"nil request", nil, false}, {"empty request", empty, false}, {"empty request with the admin token", withToken, true}} {
			ie, err := callRPC(t, h, method, c.req)
			switch {
			case err != nil:
				t.Errorf("%s, %s: untyped error %v", method, c.name, err)
			case ie == nil && !c.maySucceed:
				t.Errorf("%s, %s: succeeded, want a refusal (no token, or the request's required fields missing)", method, c.name)
			case ie != nil && ie.Code == idl.ErrorCode_INTERNAL:
				t.Errorf("%s, %s: INTERNAL (%s): a panic or an unchecked field", method, c.name, ie.Message)
			case ie != nil && ie.Message == "":
				t.Errorf("%s, %s: %v without a message", method, c.name, ie.Code)
			}
		}
		if n := counterValue(t, h.m, "idgen_rpc_panics_total", "method="+method); n != 0 {
			t.Errorf("%s: idgen_rpc_panics_total = %v, want 0", method, n)
		}
	}
}

// TestPanicLogBounded: 2,000 panicking calls (a bug a caller found) are
// each answered INTERNAL and counted in idgen_rpc_panics_total, but log one
// stack trace per window (before: one 2.9 KB entry per call, 5.9 MB for
// 2,000). The next window's line says how many were held back. The
// handler's fake clock stands still, so the count does not depend on the
// machine's speed.
func TestPanicLogBounded(t *testing.T) {
	var buf zaptest.Buffer // the calls are sequential: no lock needed
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), &buf, zapcore.DebugLevel)
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	h := &handler{log: zap.New(core), m: newMetrics(), clk: clk}
	boom := func(method string) error {
		return func() (err error) {
			defer h.done(method, "", time.Now(), &err)
			var req *idl.OrderedOwnersRequest
			_ = *req.Token // the nil dereference of the issue
			return nil
		}()
	}
	const calls = 2000
	for i := range calls {
		method := "OrderedOwners"
		if i%2 == 1 {
			method = "GetBiz"
		}
		var ie *idl.IdgenError
		if err := boom(method); !errors.As(err, &ie) || ie.Code != idl.ErrorCode_INTERNAL {
			t.Fatalf("call %d: %v, want INTERNAL", i, err)
		}
	}
	lines := strings.Count(buf.String(), "\n")
	t.Logf("%d panics logged %d bytes in %d lines", calls, buf.Len(), lines)
	if lines != 1 || !strings.Contains(buf.String(), `"stack"`) {
		t.Fatalf("%d panics in one window logged %d lines, want 1 with its stack:\n%.2000s", calls, lines, buf.String())
	}
	for _, method := range []string{"OrderedOwners", "GetBiz"} {
		if n := counterValue(t, h.m, "idgen_rpc_panics_total", "method="+method); n != calls/2 {
			t.Errorf("idgen_rpc_panics_total{method=%s} = %v, want %d", method, n, calls/2)
		}
	}
	clk.Add(panicLogWindow)
	_ = boom("OrderedOwners")
	if lines := strings.Count(buf.String(), "\n"); lines != 2 || !strings.Contains(buf.String(), `"suppressed":1999`) {
		t.Fatalf("the next window logged %d lines in all (want 2, the second with suppressed 1999):\n%.4000s", lines, buf.String())
	}
}
