package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/netpoll"
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
//
// netpoll's own lines ("NETPOLL: accept conn failed: ...", written by a
// log.Logger of its own to stderr) go the same way: see setNetpollLogger.
// The logger for them is named "netpoll" beside "kitex" (log's core with a
// fresh name: the node's root logger has no name and no options).
func setKitexLogger(log *zap.Logger) {
	l := newKitexLogger(log)
	if log.Core().Enabled(zapcore.DebugLevel) {
		l.min = klog.LevelDebug
	} else {
		l.min = klog.LevelWarn
	}
	klog.SetLogger(l)
	setNetpollLogger(zap.New(log.Core()).Named("netpoll"))
}

// netpollOut is the writer netpoll's logger writes to once
// setNetpollLogger has run; later calls (another embedded node in the same
// process) only swap the zap logger behind it.
var (
	netpollOnce sync.Once
	netpollOut  = &netpollWriter{}
)

// setNetpollLogger routes netpoll's log lines through log: one warn entry
// per line, without log.LstdFlags' date and time and without the
// "NETPOLL: " prefix, rate-limited per message prefix as Kitex's lines
// are. netpoll logs only trouble (an accept or a close that failed), hence
// warn.
//
// netpoll.SetLoggerOutput replaces a package variable that netpoll's
// pollers read without a lock, so it is called once per process, and the
// zap logger is swapped under it atomically. (netpoll.Configure would set
// the output too, but also resets its poller load balance and
// AlwaysNoCopyRead feature to the values in the Config passed, undoing an
// embedding program's netpoll.Configure.)
func setNetpollLogger(log *zap.Logger) {
	netpollOut.cur.Store(&netpollSink{log: log,
		limit: newLineLimiter(kitexBurst, kitexWindow, log, time.AfterFunc).named("netpoll")})
	netpollOnce.Do(func() {
		netpoll.SetLoggerOutput(netpollOut)
	})
}

// netpollWriter is the io.Writer under netpoll's log.Logger.
type netpollWriter struct{ cur atomic.Pointer[netpollSink] }

type netpollSink struct {
	log   *zap.Logger
	limit *lineLimiter
}

// Write logs each line of p (one log.Logger output: a date, a time and
// the message, which may span lines) as one zap entry.
func (w *netpollWriter) Write(p []byte) (int, error) {
	s := w.cur.Load()
	if s == nil {
		return os.Stderr.Write(p)
	}
	for _, line := range strings.Split(string(p), "\n") {
		msg := netpollMessage(line)
		if msg == "" || !s.limit.allow(msg) {
			continue
		}
		s.log.Warn(msg)
	}
	return len(p), nil
}

// netpollMessage strips log.LstdFlags' "2006/01/02 15:04:05 " and the
// "NETPOLL: " prefix from one line netpoll wrote.
func netpollMessage(line string) string {
	if len(line) >= 20 && line[4] == '/' && line[7] == '/' && line[10] == ' ' && line[13] == ':' && line[16] == ':' && line[19] == ' ' {
		line = line[20:]
	}
	line = strings.TrimPrefix(line, "NETPOLL: ")
	return strings.TrimSpace(line)
}

func newKitexLogger(log *zap.Logger) *kitexLogger {
	return &kitexLogger{log: log.WithOptions(zap.AddCallerSkip(2)),
		limit: newLineLimiter(kitexBurst, kitexWindow, log, time.AfterFunc)}
}

// kitexLogger adapts zap to klog.FullLogger. Fatal is logged at error
// level: a library log line must never exit the process.
//
// Warn and error lines are rate-limited per message prefix (see
// lineLimiter): Kitex logs one error line per garbage frame or broken
// connection, so a client sending junk could otherwise fill the disk and
// bury every other line.
type kitexLogger struct {
	log   *zap.Logger
	min   klog.Level
	limit *lineLimiter
}

var _ klog.FullLogger = (*kitexLogger)(nil)

func (l *kitexLogger) emit(lv klog.Level, msg string) {
	if lv < l.min {
		return
	}
	if lv >= klog.LevelWarn && !l.limit.allow(msg) {
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

// Kitex warn and error lines: at most kitexBurst per kitexWindow for one
// message prefix, then one summary line with the number dropped.
const (
	kitexBurst     = 5
	kitexWindow    = 10 * time.Second
	kitexMaxKeys   = 256 // distinct prefixes tracked at once; more share one key
	kitexPrefixLen = 64
)

// lineLimiter lets through the first burst lines of each message prefix per
// window and drops the rest; when a window in which lines were dropped
// ends, it logs one warning naming the prefix and the count.
type lineLimiter struct {
	burst  int
	window time.Duration
	log    *zap.Logger
	after  func(time.Duration, func()) *time.Timer
	what   string // whose lines, for the summary: "Kitex" unless named

	mu   sync.Mutex
	keys map[string]*lineWindow
}

type lineWindow struct{ n, dropped int }

func newLineLimiter(burst int, window time.Duration, log *zap.Logger, after func(time.Duration, func()) *time.Timer) *lineLimiter {
	return &lineLimiter{burst: burst, window: window, log: log, after: after, what: "Kitex", keys: map[string]*lineWindow{}}
}

// named sets whose lines r limits, as its summary line says.
func (r *lineLimiter) named(what string) *lineLimiter {
	r.what = what
	return r
}

// linePrefix is the part of a Kitex line that names what happened, before
// the variable details: "KITEX: processing request error, remoteAddr=...,
// error=..." is "KITEX: processing request error".
func linePrefix(msg string) string {
	if i := strings.IndexAny(msg, ",=\n"); i >= 0 {
		msg = msg[:i]
	}
	if len(msg) > kitexPrefixLen {
		msg = msg[:kitexPrefixLen]
	}
	return strings.TrimSpace(msg)
}

// allow reports whether msg may be logged now.
func (r *lineLimiter) allow(msg string) bool {
	key := linePrefix(msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.keys[key]
	if w == nil {
		if len(r.keys) >= kitexMaxKeys {
			key = "(other)"
			w = r.keys[key]
		}
		if w == nil {
			// The window starts with its first line and ends (forgetting
			// the key, and summing up what was dropped) window later.
			w = &lineWindow{}
			r.keys[key] = w
			r.after(r.window, func() { r.end(key, w) })
		}
	}
	if w.n < r.burst {
		w.n++
		return true
	}
	w.dropped++
	return false
}

func (r *lineLimiter) end(key string, w *lineWindow) {
	r.mu.Lock()
	if r.keys[key] == w {
		delete(r.keys, key)
	}
	dropped, logged := w.dropped, w.n
	r.mu.Unlock()
	if dropped > 0 {
		r.log.Warn(r.what+" log lines dropped by the rate limit", zap.String("prefix", key), zap.Int("dropped", dropped),
			zap.Int("logged", logged), zap.Duration("window", r.window))
	}
}
