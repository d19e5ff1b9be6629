package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
)

// (a copy of server/transport_test.go's test PKI: test helpers are not
// shared across packages)
// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, as PEM files in a temporary directory.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
	pool                                             *x509.CertPool
	client                                           tls.Certificate
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		must(os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idgen test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	caCert, err := x509.ParseCertificate(caDER)
	must(err)
	p := &testPKI{ca: write("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		must(err)
		kder, err := x509.MarshalECPrivateKey(key)
		must(err)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	p.client, err = tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	must(err)
	return p
}

// TestTLS: Config.TLS talks to a node started with --tls-cert: verified
// against RootCAs, the server name defaulting to each address's host and
// overridable; a wrong CA or name fails the handshake, never falling back
// to plaintext.
func TestTLS(t *testing.T) {
	pki := newTestPKI(t)
	other := newTestPKI(t)
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--tls-cert", pki.serverCert, "--tls-key", pki.serverKey}})
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
	if err := call(&tls.Config{RootCAs: pki.pool}); err != nil {
		t.Fatalf("NextN over TLS: %v", err)
	}
	if err := call(&tls.Config{RootCAs: pki.pool, ServerName: "localhost"}); err != nil {
		t.Errorf("ServerName localhost (in the certificate): %v", err)
	}
	if err := call(&tls.Config{RootCAs: pki.pool, ServerName: "wrong.example"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("ServerName not in the certificate: %v, want a certificate error", err)
	}
	if err := call(&tls.Config{RootCAs: other.pool}); err == nil || !strings.Contains(err.Error(), "certificate") {
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
