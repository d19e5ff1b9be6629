package server

import (
	"context"
	"fmt"
	"io"

	"github.com/cloudwego/kitex/pkg/klog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// setKitexLogger routes Kitex's own log lines (which are plain text such as
// "[Error] KITEX: ... invalid payload" by default) through zap, so the
// node's log is JSON from end to end and one log pipeline parses it.
//
// Kitex logs at Info about routine events (connections, retries); below
// Warn it is noise for an operator unless the node runs at debug level, so
// the zap logger's own level decides, with Warn as the floor otherwise.
func setKitexLogger(log *zap.Logger) {
	l := &kitexLogger{log: log.WithOptions(zap.AddCallerSkip(2))}
	if log.Core().Enabled(zapcore.DebugLevel) {
		l.min = klog.LevelDebug
	} else {
		l.min = klog.LevelWarn
	}
	klog.SetLogger(l)
}

// kitexLogger adapts zap to klog.FullLogger. Fatal is logged at error
// level: a library log line must never exit the process.
type kitexLogger struct {
	log *zap.Logger
	min klog.Level
}

var _ klog.FullLogger = (*kitexLogger)(nil)

func (l *kitexLogger) emit(lv klog.Level, msg string) {
	if lv < l.min {
		return
	}
	switch {
	case lv <= klog.LevelDebug:
		l.log.Debug(msg)
	case lv <= klog.LevelNotice:
		l.log.Info(msg)
	case lv == klog.LevelWarn:
		l.log.Warn(msg)
	default:
		l.log.Error(msg, zap.String("kitex_level", levelName(lv)))
	}
}

func levelName(lv klog.Level) string {
	if lv == klog.LevelFatal {
		return "fatal"
	}
	return "error"
}

func (l *kitexLogger) Trace(v ...any)  { l.emit(klog.LevelTrace, fmt.Sprint(v...)) }
func (l *kitexLogger) Debug(v ...any)  { l.emit(klog.LevelDebug, fmt.Sprint(v...)) }
func (l *kitexLogger) Info(v ...any)   { l.emit(klog.LevelInfo, fmt.Sprint(v...)) }
func (l *kitexLogger) Notice(v ...any) { l.emit(klog.LevelNotice, fmt.Sprint(v...)) }
func (l *kitexLogger) Warn(v ...any)   { l.emit(klog.LevelWarn, fmt.Sprint(v...)) }
func (l *kitexLogger) Error(v ...any)  { l.emit(klog.LevelError, fmt.Sprint(v...)) }
func (l *kitexLogger) Fatal(v ...any)  { l.emit(klog.LevelFatal, fmt.Sprint(v...)) }

func (l *kitexLogger) Tracef(f string, v ...any)  { l.emit(klog.LevelTrace, fmt.Sprintf(f, v...)) }
func (l *kitexLogger) Debugf(f string, v ...any)  { l.emit(klog.LevelDebug, fmt.Sprintf(f, v...)) }
func (l *kitexLogger) Infof(f string, v ...any)   { l.emit(klog.LevelInfo, fmt.Sprintf(f, v...)) }
func (l *kitexLogger) Noticef(f string, v ...any) { l.emit(klog.LevelNotice, fmt.Sprintf(f, v...)) }
func (l *kitexLogger) Warnf(f string, v ...any)   { l.emit(klog.LevelWarn, fmt.Sprintf(f, v...)) }
func (l *kitexLogger) Errorf(f string, v ...any)  { l.emit(klog.LevelError, fmt.Sprintf(f, v...)) }
func (l *kitexLogger) Fatalf(f string, v ...any)  { l.emit(klog.LevelFatal, fmt.Sprintf(f, v...)) }

func (l *kitexLogger) CtxTracef(_ context.Context, f string, v ...any) { l.Tracef(f, v...) }
func (l *kitexLogger) CtxDebugf(_ context.Context, f string, v ...any) { l.Debugf(f, v...) }
func (l *kitexLogger) CtxInfof(_ context.Context, f string, v ...any)  { l.Infof(f, v...) }
func (l *kitexLogger) CtxNoticef(_ context.Context, f string, v ...any) {
	l.Noticef(f, v...)
}
func (l *kitexLogger) CtxWarnf(_ context.Context, f string, v ...any)  { l.Warnf(f, v...) }
func (l *kitexLogger) CtxErrorf(_ context.Context, f string, v ...any) { l.Errorf(f, v...) }
func (l *kitexLogger) CtxFatalf(_ context.Context, f string, v ...any) { l.Fatalf(f, v...) }

// SetLevel raises or lowers the floor below which Kitex lines are dropped.
func (l *kitexLogger) SetLevel(lv klog.Level) { l.min = lv }

// SetOutput is ignored: the output is the node's zap logger.
func (l *kitexLogger) SetOutput(io.Writer) {}
