package server

import (
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idgen/idgen/clock"
)

// TestMeasure_EmptyRequestLog measures the log written by 2,000 empty
// OrderedOwners calls (issue 30, item 6), served through the generated
// service's handler as Kitex serves a decoded frame. It asserts nothing
// (IDGEN_MEASURE=1 only) and runs unchanged against older code.
func TestMeasure_EmptyRequestLog(t *testing.T) {
	measuring(t)
	var buf syncBuffer
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), &buf, zapcore.DebugLevel)
	m := newMetrics()
	h := &handler{log: zap.New(core), m: m, node: newNode(clock.System{}, Config{}), clk: clock.System{},
		auth: newAuthFailures(zap.New(core), m)}
	const calls = 2000
	for range calls {
		callRPC(t, h, "OrderedOwners", nil)
	}
	line := fmt.Sprintf("MEASURE %d empty OrderedOwners calls: %d bytes of log in %d lines", calls, buf.Len(), countLines(buf.String()))
	t.Log(line)
	fmt.Println(line)
}

func countLines(s string) int {
	n := 0
	for _, c := range s {
		if c == '\n' {
			n++
		}
	}
	return n
}
