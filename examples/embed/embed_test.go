package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idgen/idgen/internal/inproc"
	"github.com/idgen/idgen/internal/wait"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/server"
)

// TestEmbeddedServerRunsKitexOptions: the server embedded with
// server.Run and this example's KitexOptions serves, and the tracer counts
// the RPCs it served; the middleware sees every call (a zero threshold
// logs them all), and says so through zap with the method as a field.
func TestEmbeddedServerRunsKitexOptions(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	counter := NewRPCCounter(log)
	// A zero threshold makes every call "slow": the middleware's line
	// shows it ran.
	opts := KitexOptions(counter, log, 0)
	n := inproc.Start(t, server.Options{Version: "test", KitexOptions: opts}, "--data-dir", t.TempDir())
	c := n.Client(t)
	// Standalone: the business is created on first use.
	wait.OK(t, 30*time.Second, "NextIDs", func() error {
		_, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "order", Count: 3})
		return err
	})
	// The tracer's Finish runs after the reply is sent.
	wait.OK(t, 10*time.Second, "the tracer counting NextIDs", func() error {
		if counter.Calls("NextIDs") == 0 {
			return fmt.Errorf("counted %s", counter)
		}
		return nil
	})
	slow := logs.FilterMessage("slow RPC").FilterField(zap.String("method", "NextIDs")).All()
	if len(slow) == 0 {
		t.Fatalf("middleware logged %v, want a slow RPC line for NextIDs", logs.All())
	}
	if slow[0].Level != zapcore.WarnLevel {
		t.Errorf("slow RPC logged at %v, want warn", slow[0].Level)
	}
}

// TestLoggerWritesJSON: the example's lines are JSON objects in the
// node's encoding (level, ISO 8601 time, logger name, message, fields).
func TestLoggerWritesJSON(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf)
	log.Info("RPCs so far", zap.Stringer("calls", NewRPCCounter(log)))
	log.Debug("not at info")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1: %q", len(lines), buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatalf("not JSON: %q: %v", lines[0], err)
	}
	if m["level"] != "info" || m["logger"] != "embed" || m["msg"] != "RPCs so far" {
		t.Errorf("line %v", m)
	}
	if ts, _ := m["ts"].(string); len(ts) < len("2006-01-02T15:04:05") || ts[10] != 'T' {
		t.Errorf("ts %q is not ISO 8601, the node's encoding", m["ts"])
	}
}

// TestNoStandardLog: no file of the example imports the standard log
// package, whose plain text lines would break the node's JSON stream.
func TestNoStandardLog(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "log" {
				t.Errorf("%s imports the standard log package: log through zap", f)
			}
		}
	}
}
