package worker

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idgen/idgen/internal/strictjson"
)

// jsonLog is a logger writing production JSON lines to a buffer the test
// reads.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (j *jsonLog) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.buf.Write(p)
}

func (j *jsonLog) logger() *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(j), zapcore.DebugLevel))
}

func (j *jsonLog) lines() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Split(strings.TrimRight(j.buf.String(), "\n"), "\n")
}

// with returns the lines containing s.
func (j *jsonLog) with(s string) []string {
	var out []string
	for _, l := range j.lines() {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// A clean Close stops the holder as a fence does, but it is planned: no
// warning (issue 32: "worker slot fenced" at every SIGTERM), and every
// line is strict JSON (the "worker lease closed" line had "idc" twice).
func TestCleanCloseIsNotAFence(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	var log jsonLog
	cfg := fakeConfig(t, f, h, 9000)
	cfg.IDC = 1
	cfg.Logger = log.logger()
	l := register(t, cfg)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if snap := h.snap(); len(snap.fenced) != 1 {
		t.Fatalf("holder stopped %d times by Close, want 1", len(snap.fenced))
	}
	if w := log.with(`"level":"warn"`); len(w) != 0 {
		t.Fatalf("a clean close warned:\n%s", strings.Join(w, "\n"))
	}
	if r := log.with("worker slot released for shutdown"); len(r) != 1 || !strings.Contains(r[0], `"level":"info"`) {
		t.Fatalf("release lines %q, want one at info", r)
	}
	if c := log.with(`"worker lease closed"`); len(c) != 1 {
		t.Fatalf("close lines %q, want one", c)
	}
	for _, line := range log.lines() {
		if err := strictjson.Check(line); err != nil {
			t.Errorf("%v: %s", err, line)
		}
	}
}

// A fence that is a fault (the session expired) stays a warning.
func TestSessionExpiryFenceWarns(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	var log jsonLog
	cfg := fakeConfig(t, f, h, 9000)
	cfg.Logger = log.logger()
	l := register(t, cfg)
	connOf(l).Renew(false)
	waitFor(t, "the fence", 5*time.Second, func() bool { return len(h.snap().fenced) == 1 })
	waitFor(t, "the fence's line", 5*time.Second, func() bool { return len(log.with("worker slot fenced")) == 1 })
	if w := log.with("worker slot fenced")[0]; !strings.Contains(w, `"level":"warn"`) {
		t.Fatalf("fence line %s, want warn", w)
	}
	if r := log.with("released for shutdown"); len(r) != 0 {
		t.Fatalf("a fault logged as a planned release: %q", r)
	}
}
