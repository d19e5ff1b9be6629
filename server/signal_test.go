package server

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A SIGTERM ends Main's context with a cause naming it, and the stop's
// first line says so (issue 32: no line said a SIGTERM had arrived).
func TestSignalContextNamesTheSignal(t *testing.T) {
	ctx, stop := signalContext(os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("the context was not cancelled by SIGTERM")
	}
	var s signalStop
	if !errors.As(context.Cause(ctx), &s) || s.sig != syscall.SIGTERM {
		t.Fatalf("cause %v, want SIGTERM", context.Cause(ctx))
	}
	core, logs := observer.New(zapcore.InfoLevel)
	logStopping(ctx, zap.New(core))
	if e := logs.All(); len(e) != 1 || e[0].Message != "received SIGTERM, handing off" || e[0].Level != zapcore.InfoLevel {
		t.Fatalf("lines %v, want one info line \"received SIGTERM, handing off\"", e)
	}
}

// A context its caller cancelled (Run embedded, a test) is no signal.
func TestLogStoppingWithoutSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	core, logs := observer.New(zapcore.InfoLevel)
	logStopping(ctx, zap.New(core))
	if e := logs.All(); len(e) != 1 || e[0].Message != "stopping, handing off" {
		t.Fatalf("lines %v, want one \"stopping, handing off\"", e)
	}
}
