package client

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
)

// TestTLS: Config.TLS talks to a node started with --tls-cert: verified
// against RootCAs, the server name defaulting to each address's host and
// overridable; a wrong CA or name fails the handshake, never falling back
// to plaintext.
func TestTLS(t *testing.T) {
	pki := testnode.NewPKI(t)
	other := testnode.NewPKI(t)
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey}})
	call := func(tc *tls.Config) error {
		c, err := New(Config{Addrs: []string{node.RPCAddr}, TLS: tc, MaxAttempts: 1, CallTimeout: 5 * time.Second,
			RPCTimeout: 5 * time.Second, ConnectTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		// Several calls: the pooled TLS connection is reused.
		for range 3 {
			rs, err := c.NextN(context.Background(), "tls", 5)
			if err != nil {
				return err
			}
			n := int64(0)
			for _, r := range rs {
				n += r.Len()
			}
			if n != 5 {
				t.Errorf("%d IDs, want 5", n)
			}
		}
		return nil
	}
	if err := call(&tls.Config{RootCAs: pki.Pool}); err != nil {
		t.Fatalf("NextN over TLS: %v", err)
	}
	if err := call(&tls.Config{RootCAs: pki.Pool, ServerName: "localhost"}); err != nil {
		t.Errorf("ServerName localhost (in the certificate): %v", err)
	}
	if err := call(&tls.Config{RootCAs: pki.Pool, ServerName: "wrong.example"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("ServerName not in the certificate: %v, want a certificate error", err)
	}
	if err := call(&tls.Config{RootCAs: other.Pool}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("another CA: %v, want a certificate error", err)
	}
	if err := call(nil); err == nil {
		t.Errorf("a plaintext client was served by the TLS node")
	}
}

// TestTLSDialIgnoredWithDial: Config.Dial wins over Config.TLS (tests and
// programs with their own transport).
func TestTLSDialIgnoredWithDial(t *testing.T) {
	called := false
	cfg := Config{Addrs: []string{"127.0.0.1:1"}, TLS: &tls.Config{}, Dial: func(string) (Conn, error) { called = true; return nil, nil }}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	_, _ = cfg.Dial("x")
	if !called {
		t.Error("Config.TLS replaced Config.Dial")
	}
}
