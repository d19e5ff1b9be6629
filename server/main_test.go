package server

import (
	"io"
	"os"
	"testing"

	"github.com/cloudwego/kitex/pkg/klog"
)

// TestMain silences the Kitex clients of the tests: their retry warnings
// ("auto retry retryable error" while a node restarts) are expected and
// would bury a failure under hundreds of lines. The nodes under test log
// Kitex lines through zap into their own captured logs.
func TestMain(m *testing.M) {
	klog.SetOutput(io.Discard)
	klog.SetLevel(klog.LevelFatal)
	os.Exit(m.Run())
}
