package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/ext"
)

// AuditName is the name businesses list to enable the audit plugin.
const AuditName = "audit"

// DefaultAuditBuffer is how many records may wait for the writer.
const DefaultAuditBuffer = 4096

// MaxAuditRanges is the most ranges one record lists; a request served in
// more (a large SNOWFLAKE batch spanning many milliseconds) lists the first
// ones and sets ranges_truncated (count is always exact).
const MaxAuditRanges = 16

// AuditRecord is one line of the audit file.
type AuditRecord struct {
	Time      time.Time  `json:"time"`
	Biz       string     `json:"biz"`
	Channel   string     `json:"channel"`          // the channel asked for
	Served    string     `json:"served,omitempty"` // the channel that served
	Fallback  bool       `json:"fallback,omitempty"`
	Count     int64      `json:"count"`
	Ranges    [][2]int64 `json:"ranges,omitempty"` // inclusive, before obfuscation
	Truncated bool       `json:"ranges_truncated,omitempty"`
	SubKey    string     `json:"sub_key,omitempty"`
	Caller    string     `json:"caller,omitempty"`
	ServedBy  string     `json:"served_by,omitempty"`
	Worker    int        `json:"worker"`
	Error     string     `json:"error,omitempty"` // the request failed
}

// AuditConfig configures an Audit.
type AuditConfig struct {
	// ServedBy names this node in every record (e.g. its RPC address).
	ServedBy string
	// Buffer is how many records may wait for the writer (0: DefaultAuditBuffer).
	// When it is full, records are dropped and counted: issuance never waits.
	Buffer int
	Logger *zap.Logger
}

// Audit is the audit plugin: one bounded, non-blocking record per request
// of the businesses that enable it, written as JSON lines by one writer
// goroutine. Close flushes.
type Audit struct {
	cfg     AuditConfig
	log     *zap.Logger
	ch      chan AuditRecord
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once
	w       io.Writer
	closer  io.Closer
	dropped prometheus.Counter
	written prometheus.Counter
	errs    prometheus.Counter
}

var _ ext.Plugin = (*Audit)(nil)

// OpenAudit appends to the file at path (created with its directory).
func OpenAudit(path string, cfg AuditConfig) (*Audit, error) {
	// 0700: by default this is the node's data directory.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	a := NewAudit(f, cfg)
	a.closer = f
	return a, nil
}

// NewAudit writes records to w. The caller keeps ownership of w.
func NewAudit(w io.Writer, cfg AuditConfig) *Audit {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultAuditBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	a := &Audit{cfg: cfg, log: cfg.Logger, ch: make(chan AuditRecord, cfg.Buffer), stop: make(chan struct{}), done: make(chan struct{}), w: w,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_audit_dropped_total",
			Help: "Audit records dropped because the writer was behind (full buffer), the sink failed or the plugin was closed."}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_audit_written_total",
			Help: "Audit records written."}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_audit_write_errors_total",
			Help: "Failed writes to the audit sink."}),
	}
	go a.run()
	return a
}

// Collectors returns the audit metrics for the node's registry.
func (a *Audit) Collectors() []prometheus.Collector {
	return []prometheus.Collector{a.dropped, a.written, a.errs}
}

// Name implements ext.Plugin.
func (a *Audit) Name() string { return AuditName }

// Order implements ext.Plugin: audit runs last, after any plugin that may
// refuse.
func (a *Audit) Order() int { return 1000 }

// Before implements ext.Plugin (audit never refuses).
func (a *Audit) Before(context.Context, *ext.Call) error { return nil }

// After records an issued request.
func (a *Audit) After(_ context.Context, c *ext.Call, res *ext.Result) {
	r := a.record(c)
	r.Served, r.Fallback = channelLabel(res.Channel), res.Fallback
	n := len(res.Ranges)
	if n > MaxAuditRanges {
		n, r.Truncated = MaxAuditRanges, true
	}
	r.Ranges = make([][2]int64, n)
	for i := 0; i < n; i++ {
		r.Ranges[i] = [2]int64{res.Ranges[i].First, res.Ranges[i].Last}
	}
	for _, rg := range res.Ranges {
		r.Count += rg.Len()
	}
	a.put(r)
}

// OnError records a failed request (count is what was asked for).
func (a *Audit) OnError(_ context.Context, c *ext.Call, err error) {
	r := a.record(c)
	r.Count = int64(c.Count)
	r.Error = err.Error()
	a.put(r)
}

func (a *Audit) record(c *ext.Call) AuditRecord {
	t := c.Start
	if t.IsZero() {
		t = time.Now()
	}
	return AuditRecord{Time: t.UTC(), Biz: c.Biz.Name, Channel: channelLabel(c.Channel), SubKey: c.SubKey, Caller: c.Caller,
		ServedBy: a.cfg.ServedBy, Worker: c.Worker}
}

// put hands r to the writer without ever waiting.
func (a *Audit) put(r AuditRecord) {
	if a.closed.Load() {
		a.dropped.Inc()
		return
	}
	select {
	case a.ch <- r:
	default:
		a.dropped.Inc()
	}
}

func (a *Audit) run() {
	defer close(a.done)
	// Records are batched into whole lines: every Write to the sink ends
	// on a newline, so a file shared by mistake never gets torn records.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	var lastErr time.Time
	fail := func(what string, err error, n int) {
		a.errs.Inc()
		a.dropped.Add(float64(n))
		if time.Since(lastErr) > time.Minute {
			lastErr = time.Now()
			a.log.Error("audit: "+what+" failed (records are dropped while it fails)", zap.Error(err))
		}
	}
	pending := 0
	flush := func() {
		if buf.Len() == 0 {
			return
		}
		if _, err := a.w.Write(buf.Bytes()); err != nil {
			fail("writing the audit file", err, pending)
		} else {
			a.written.Add(float64(pending))
		}
		buf.Reset()
		pending = 0
	}
	add := func(r AuditRecord) {
		if err := enc.Encode(r); err != nil {
			fail("encoding a record", err, 1)
			return
		}
		pending++
		if buf.Len() >= 64<<10 {
			flush()
		}
	}
	for {
		select {
		case r := <-a.ch:
			add(r)
			if len(a.ch) == 0 {
				flush()
			}
		case <-a.stop:
			for {
				select {
				case r := <-a.ch:
					add(r)
				default:
					flush()
					return
				}
			}
		}
	}
}

// ErrAuditCloseTimeout: Close gave up waiting for the sink.
var ErrAuditCloseTimeout = errors.New("audit: the sink did not take the pending records in time")

// Close stops taking records, writes the pending ones, flushes and closes
// the file it opened. It waits at most timeout (0: 5s) for a slow sink.
func (a *Audit) Close(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	var err error
	a.once.Do(func() {
		a.closed.Store(true)
		close(a.stop)
		select {
		case <-a.done:
		case <-time.After(timeout):
			err = ErrAuditCloseTimeout
			return
		}
		if a.closer != nil {
			err = a.closer.Close()
		}
	})
	return err
}
