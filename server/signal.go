package server

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
)

// signalStop is the cause of Main's context when a signal ends it, so Run
// can say which signal it received before it hands anything off.
type signalStop struct{ sig os.Signal }

func (e signalStop) Error() string { return "received " + signalName(e.sig) }

// signalName is the conventional name of the two signals Main stops on
// (Go's own String of SIGTERM is "terminated").
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case os.Interrupt:
		return "SIGINT"
	}
	return sig.String()
}

// signalContext is signal.NotifyContext that remembers the signal: the
// context is cancelled with a signalStop cause on the first of sigs.
// Later signals are caught (and ignored) until stop, as with
// NotifyContext: a second SIGTERM does not cut the hand-off short.
func signalContext(sigs ...os.Signal) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel(signalStop{sig})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(context.Canceled)
	}
}

// logStopping is the first line of a stop, before the ORDERED hand-off
// (which can take seconds): "received SIGTERM, handing off" when a signal
// ended ctx, "stopping, handing off" with the cause otherwise (Run's
// caller cancelled it).
func logStopping(ctx context.Context, log *zap.Logger) {
	var s signalStop
	if cause := context.Cause(ctx); errors.As(cause, &s) {
		log.Info("received " + signalName(s.sig) + ", handing off")
	} else {
		log.Info("stopping, handing off", zap.NamedError("cause", cause))
	}
}
