package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// healthFake serves /healthz and /readyz like a node's admin port, with the
// answers a test sets, and records the queries it received.
type healthFake struct {
	mu          sync.Mutex
	readyStatus int
	readyBody   string
	healthz     int
	delay       time.Duration
	queries     []string
}

func startHealthFake(t *testing.T, f *healthFake) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		code, delay := f.healthz, f.delay
		f.queries = append(f.queries, r.URL.RequestURI())
		f.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		if code == 0 {
			code = http.StatusOK
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		code, body := f.readyStatus, f.readyBody
		f.queries = append(f.queries, r.URL.RequestURI())
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

const (
	readyServing = `{"ready":true,"state":"serving","mode":"standalone","channels":{"ordered":{"state":"serving","ready":true},"snowflake":{"state":"serving","ready":true},"unordered":{"state":"serving","ready":true}}}`
	readyWaiting = `{"ready":false,"state":"starting","reason":"waiting past the worker slot's high-water mark","wait_remaining_ms":1234,"mode":"zk+mysql","channels":{"ordered":{"state":"serving","ready":true},"snowflake":{"state":"starting","ready":false,"reason":"waiting past the mark","retry_after_ms":1234},"unordered":{"state":"serving","ready":true}}}`
	// The node as a whole is ready (SNOWFLAKE falls back), the strict
	// snowflake probe is not.
	readyRollback = `{"ready":true,"state":"clock_rollback","mode":"standalone","channels":{"snowflake":{"state":"clock_rollback","ready":false,"can_fall_back":true,"reason":"clock stepped back 900ms","retry_after_ms":900},"unordered":{"state":"serving","ready":true}}}`
)

func TestHealthHealthz(t *testing.T) {
	cleanEnv(t)
	t.Setenv("IDGEN_ADMIN_ADDR", "")
	f := &healthFake{}
	addr := startHealthFake(t, f)
	code, out, errOut := runCLI(t, "health", "--admin-addr", addr)
	if code != 0 || !strings.Contains(out, "healthy: GET http://"+addr+"/healthz answered 200 OK") || errOut != "" {
		t.Fatalf("health: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	f.mu.Lock()
	f.healthz = http.StatusInternalServerError
	f.mu.Unlock()
	code, out, errOut = runCLI(t, "health", "--admin-addr", addr)
	if code != 1 || out != "" || !strings.Contains(errOut, "idctl: unhealthy: GET http://"+addr+"/healthz answered 500 Internal Server Error: ok") {
		t.Fatalf("health on a 500: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	checkOnePrefix(t, errOut)
}

func TestHealthReady(t *testing.T) {
	cleanEnv(t)
	f := &healthFake{readyStatus: http.StatusOK, readyBody: readyServing}
	addr := startHealthFake(t, f)

	code, out, errOut := runCLI(t, "health", "--admin-addr", addr, "--ready")
	if code != 0 || !strings.Contains(out, "ready: GET http://"+addr+"/readyz answered 200 OK: state serving, mode standalone") {
		t.Fatalf("ready: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	f.mu.Lock()
	f.readyStatus, f.readyBody = http.StatusServiceUnavailable, readyWaiting
	f.mu.Unlock()
	code, out, errOut = runCLI(t, "health", "--admin-addr", addr, "--ready")
	want := "idctl: not ready: GET http://" + addr + "/readyz answered 503 Service Unavailable: state starting, mode zk+mysql: " +
		"waiting past the worker slot's high-water mark (wait 1234 ms); snowflake starting: waiting past the mark (retry after 1234 ms)\n"
	if code != 1 || out != "" || errOut != want {
		t.Fatalf("not ready: exit %d, stdout %q, stderr\n%q, want\n%q", code, out, errOut, want)
	}

	// --channel asks the strict probe (and implies --ready).
	f.mu.Lock()
	f.readyStatus, f.readyBody = http.StatusServiceUnavailable, readyRollback
	f.mu.Unlock()
	code, _, errOut = runCLI(t, "health", "--admin-addr", addr, "--channel", "snowflake")
	if code != 1 || !strings.Contains(errOut, "/readyz?channel=snowflake answered 503") ||
		!strings.Contains(errOut, "snowflake clock_rollback (falls back to segments): clock stepped back 900ms (retry after 900 ms)") {
		t.Fatalf("strict snowflake probe: exit %d, stderr %q", code, errOut)
	}
	f.mu.Lock()
	f.readyStatus = http.StatusOK
	f.mu.Unlock()
	code, out, _ = runCLI(t, "health", "--admin-addr", addr, "--ready", "--channel", "unordered")
	if code != 0 || !strings.Contains(out, "/readyz?channel=unordered answered 200 OK: state clock_rollback, mode standalone; unordered serving") {
		t.Fatalf("unordered probe: exit %d, stdout %q", code, out)
	}

	f.mu.Lock()
	got := append([]string(nil), f.queries...)
	f.mu.Unlock()
	want4 := []string{"/readyz", "/readyz", "/readyz?channel=snowflake", "/readyz?channel=unordered"}
	if strings.Join(got, " ") != strings.Join(want4, " ") {
		t.Fatalf("queries %q, want %q", got, want4)
	}

	// A 503 that is not /readyz JSON still says what came back.
	f.mu.Lock()
	f.readyStatus, f.readyBody = http.StatusServiceUnavailable, "upstream connect error"
	f.mu.Unlock()
	code, _, errOut = runCLI(t, "health", "--admin-addr", addr, "--ready")
	if code != 1 || !strings.Contains(errOut, "answered 503 Service Unavailable: upstream connect error") {
		t.Fatalf("non-JSON 503: exit %d, stderr %q", code, errOut)
	}
}

func TestHealthUnreachableAndSlow(t *testing.T) {
	cleanEnv(t)
	// A port nobody listens on: refused at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	code, _, errOut := runCLI(t, "health", "--admin-addr", closed)
	if code != 1 || !strings.Contains(errOut, "idctl: unhealthy: GET http://"+closed+"/healthz: dial tcp") ||
		!strings.Contains(errOut, "refused") {
		t.Fatalf("refused: exit %d, stderr %q", code, errOut)
	}
	checkOnePrefix(t, errOut)

	// A node that does not answer in time: exit 1 after --timeout, not a hang.
	f := &healthFake{delay: 5 * time.Second}
	addr := startHealthFake(t, f)
	start := time.Now()
	code, _, errOut = runCLI(t, "health", "--admin-addr", addr, "--timeout", "200ms")
	took := time.Since(start)
	if code != 1 || !strings.Contains(errOut, "no answer within 200ms") {
		t.Fatalf("slow: exit %d, stderr %q", code, errOut)
	}
	if took > 3*time.Second {
		t.Fatalf("slow node: took %v with --timeout 200ms", took)
	}
}

// TestHealthDefaultAddr: without --admin-addr, idctl health asks the address in
// IDGEN_ADMIN_ADDR (the node's own setting), a wildcard host meaning this
// host's loopback: what a container's HEALTHCHECK relies on.
func TestHealthDefaultAddr(t *testing.T) {
	cleanEnv(t)
	addr := startHealthFake(t, &healthFake{})
	_, port, _ := net.SplitHostPort(addr)
	for _, env := range []string{"0.0.0.0:" + port, ":" + port, "127.0.0.1:" + port} {
		t.Setenv("IDGEN_ADMIN_ADDR", env)
		code, out, errOut := runCLI(t, "health")
		if code != 0 || !strings.Contains(out, "GET http://127.0.0.1:"+port+"/healthz answered 200 OK") {
			t.Fatalf("IDGEN_ADMIN_ADDR=%s: exit %d, stdout %q, stderr %q", env, code, out, errOut)
		}
	}
	for addr, want := range map[string]string{"[::]:8889": "[::1]:8889", "node-0.idgen:8889": "node-0.idgen:8889"} {
		got, err := healthHostPort(addr)
		if err != nil || got != want {
			t.Errorf("healthHostPort(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
}

func TestHealthUsage(t *testing.T) {
	cleanEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"health", "--channel", "segment"}, `--channel "segment": want snowflake, unordered or ordered`},
		{[]string{"health", "--admin-addr", "http://127.0.0.1:8889/healthz"}, "want HOST:PORT (no scheme or path)"},
		{[]string{"health", "--admin-addr", "127.0.0.1"}, "missing port"},
		{[]string{"health", "--timeout", "0s"}, "want a positive duration"},
		{[]string{"health", "extra"}, `unexpected argument "extra"`},
	} {
		code, _, errOut := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "usage: idctl health") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
	code, out, _ := runCLI(t, "health", "--help")
	if code != 0 || !strings.Contains(out, "usage: idctl health") || !strings.Contains(out, "HEALTHCHECK") {
		t.Fatalf("health --help: exit %d, stdout %q", code, out)
	}
}
