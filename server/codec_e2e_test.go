package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/idgen/idgen/internal/testnode"
	"github.com/idgen/idgen/internal/wait"
)

// startInProcess runs a standalone node (Run) inside the test's process,
// so that the test can read the Go heap the node allocates from, with
// args after free --rpc-addr/--admin-addr and a fresh --data-dir. It
// returns once a call answers (call is how: plaintext or TLS); the node
// stops when the test ends. (internal/inproc does the same for other
// packages; it imports this one.)
func startInProcess(t *testing.T, call func(addr string) error, args ...string) (rpcAddr, adminAddr string) {
	t.Helper()
	rpcAddr = fmt.Sprintf("127.0.0.1:%d", testnode.FreePort(t))
	adminAddr = fmt.Sprintf("127.0.0.1:%d", testnode.FreePort(t))
	args = append([]string{"--rpc-addr", rpcAddr, "--admin-addr", adminAddr, "--data-dir", t.TempDir(), "--log-level", "error"}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Version: "test"}, args, func(string) string { return "" }, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	wait.OK(t, 60*time.Second, "the in-process node answering", func() error { return call(rpcAddr) })
	// Every channel started (stopping a node that is still claiming its
	// ORDERED shards fails Run).
	wait.OK(t, 60*time.Second, "the ORDERED channel ready", func() error {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + adminAddr + "/readyz?channel=ordered")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz?channel=ordered: %s", resp.Status)
		}
		return nil
	})
	return rpcAddr, adminAddr
}

// sendAndWaitClose writes frame on c and reads until the server closes the
// connection, reporting false if it was still open after d (a bound that
// only ends a hang). Whatever the server answers before closing is read
// and dropped.
func sendAndWaitClose(c net.Conn, frame []byte, d time.Duration) (bool, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write(frame); err != nil {
		return true, nil // already closed by the server
	}
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, nil
	}
	return true, nil
}

// TestE2E_AttackFramesRefused: the frames of issue 30 (a CreateBiz whose
// plugins list claims 2^31-1 elements; a method name that claims 2^31-1
// bytes, framed and unframed) sent before any authentication to a real
// node, on netpoll and on TLS, with tokens set: the node closes each
// connection without allocating for what the frame declares (under 64 MiB
// of Go heap for all of them; on main the list frame asks for 32 GiB and
// a method name for 2 GiB), counts them, and still serves a normal call.
func TestE2E_AttackFramesRefused(t *testing.T) {
	pki := testnode.NewPKI(t)
	tc := &tls.Config{RootCAs: pki.Pool, ServerName: "127.0.0.1"}
	for _, tr := range []struct {
		name string
		args []string
		call func(string) error
		dial func(string) (net.Conn, error)
	}{
		{"netpoll", nil, callOnce, func(a string) (net.Conn, error) { return net.DialTimeout("tcp", a, 5*time.Second) }},
		{"tls", []string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey},
			func(a string) error { return tlsCallOnce(a, tc) },
			func(a string) (net.Conn, error) {
				return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", a, tc)
			}},
	} {
		t.Run(tr.name, func(t *testing.T) {
			args := append([]string{"--admin-token", testAdminToken}, tr.args...)
			rpc, admin := startInProcess(t, tr.call, args...)
			frames := []struct {
				name   string
				frame  []byte
				reason string
			}{
				{"list, framed (46 bytes)", hugeListFrame(), rejectDeclared},
				{"list, TTHeader", ttheaderFrame(hugeListFrame()[4:], true), rejectDeclared},
				{"method name, framed", framedFrame(hugeNameMessage()), rejectDeclared},
				{"method name, unframed", hugeNameMessage(), rejectTooLarge},
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for _, f := range frames {
				for range 4 {
					c, err := tr.dial(rpc)
					if err != nil {
						t.Fatal(err)
					}
					closed, _ := sendAndWaitClose(c, f.frame, 60*time.Second)
					c.Close()
					if !closed {
						t.Fatalf("%s: the connection was still open after 60s", f.name)
					}
				}
			}
			runtime.ReadMemStats(&after)
			if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
				t.Errorf("16 attack frames made the process allocate %d MiB (want under 64 MiB)", d>>20)
			}
			if err := tr.call(rpc); err != nil {
				t.Fatalf("a normal call after the attack frames: %v", err)
			}
			for reason, want := range map[string]float64{rejectDeclared: 12, rejectTooLarge: 4} {
				name := fmt.Sprintf("idgen_rpc_frames_rejected_total{reason=%q}", reason)
				if got := metric(t, admin, name); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		})
	}
}

// tlsCallOnce is callOnce over TLS: one framed NextIDs on a connection it
// closes itself. (A Kitex client's pooled connection would stay open after
// the test, and the gonet server's shutdown waits for it until
// shutdown_timeout, failing Run.)
func tlsCallOnce(addr string, tc *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		return err
	}
	cfg := &thrift.TConfiguration{SocketTimeout: 5 * time.Second}
	trans := thrift.NewTFramedTransportConf(thrift.NewTSocketFromConnConf(c, cfg), cfg)
	defer trans.Close()
	if !sendOnce(trans, "conns") {
		return errors.New("no answer (connection closed)")
	}
	return nil
}

// TestE2E_GRPCNotServed: the plaintext RPC port serves Thrift over
// TTHeader, framed and buffered transports only. Kitex's default netpoll
// handler also detected gRPC (HTTP/2 without TLS) and served idgen's
// methods through the gRPC codec, where neither boundedCodec nor the
// connection cap look: on main the CreateBiz of the list attack, sent as
// gRPC with a Thrift payload, kills the process (fatal error: out of
// memory). Now the connection is closed, nothing is allocated for it, and
// the node serves.
func TestE2E_GRPCNotServed(t *testing.T) {
	rpc, admin := startInProcess(t, callOnce)
	// HTTP/2 with prior knowledge, as gRPC clients speak it without TLS.
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &h2c}
	defer tr.CloseIdleConnections()
	// gRPC framing (not compressed, length) around the Thrift arguments of
	// the list attack.
	args := []byte{tSTRUCT, 0, 1, tSTRING, 0, 1, 0, 0, 0, 1, 'x', tLIST, 0, 13, tSTRING, 0x7f, 0xff, 0xff, 0xff, tSTOP, tSTOP}
	body := append([]byte{0}, binary.BigEndian.AppendUint32(nil, uint32(len(args)))...)
	body = append(body, args...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, path := range []string{"/idgen.IDGenService/CreateBiz", "/IDGenService/CreateBiz"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+rpc+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("content-type", "application/grpc+thrift")
		req.Header.Set("te", "trailers")
		resp, err := tr.RoundTrip(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Errorf("gRPC %s answered: %s %q", path, resp.Status, b)
		}
		cancel()
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Errorf("two gRPC requests made the process allocate %d MiB", d>>20)
	}
	if err := callOnce(rpc); err != nil {
		t.Fatalf("a normal call after the gRPC requests: %v", err)
	}
	if got := metric(t, admin, `idgen_rpc_frames_rejected_total{reason="protocol"}`); got < 1 {
		t.Errorf(`idgen_rpc_frames_rejected_total{reason="protocol"} = %v, want at least 1`, got)
	}
}
