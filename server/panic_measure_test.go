package server

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/clock"
)

// TestMeasure_EmptyRequestLog measures the log written by 2,000 empty
// OrderedOwners calls (issue 30, item 6), served through the generated
// service's handler as Kitex serves a decoded frame. It asserts nothing
// (IDGEN_MEASURE=1 only) and runs unchanged against older code.
func TestMeasure_EmptyRequestLog(t *testing.T) {
	measuring(t)
	var buf zaptest.Buffer // the calls are sequential: no lock needed
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), &buf, zapcore.DebugLevel)
	m := newMetrics()
	h := &handler{log: zap.New(core), m: m, node: newNode(clock.System{}, Config{}), clk: clock.System{},
		auth: newAuthFailures(zap.New(core), m)}
	const calls = 2000
	for range calls {
		callRPC(t, h, "OrderedOwners", nil)
	}
	line := fmt.Sprintf("MEASURE %d empty OrderedOwners calls: %d bytes of log in %d lines", calls, buf.Len(), strings.Count(buf.String(), "\n"))
	t.Log(line)
	fmt.Println(line)
}
