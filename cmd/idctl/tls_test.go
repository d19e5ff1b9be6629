package main

import (
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
	"strconv"
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

// TestGetOverTLS: idctl get speaks TLS with --tls-ca (and mutual TLS with
// --tls-cert/--tls-key); without them it cannot talk to a TLS node; parse
// (newClient) speaks TLS from IDGEN_TLS_CA alone.
func TestGetOverTLS(t *testing.T) {
	cleanEnv(t)
	for _, k := range []string{"IDGEN_TLS_CA", "IDGEN_TLS_CERT", "IDGEN_TLS_KEY", "IDGEN_TLS_SERVER_NAME"} {
		t.Setenv(k, "")
	}
	pki := newTestPKI(t)
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--tls-cert", pki.serverCert, "--tls-key", pki.serverKey,
		"--tls-client-ca", pki.ca}})
	base := []string{"get", "--addr", node.RPCAddr, "--biz", "tls", "--channel", "snowflake", "--timeout", "2s"}
	code, out, errOut := runCLI(t, append(base, "--tls-ca", pki.ca, "--tls-cert", pki.clientCert, "--tls-key", pki.clientKey)...)
	if code != 0 {
		t.Fatalf("idctl get over mutual TLS: exit %d: %s", code, errOut)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || id <= 0 {
		t.Fatalf("output %q: want one ID", out)
	}
	if code, _, _ := runCLI(t, append(base, "--tls-ca", pki.ca)...); code == 0 {
		t.Errorf("idctl get without a client certificate succeeded against --tls-client-ca")
	}
	if code, _, _ := runCLI(t, base...); code == 0 {
		t.Errorf("idctl get in plaintext succeeded against a TLS node")
	}
	if code, _, errOut := runCLI(t, append(base, "--tls-ca", pki.ca, "--tls-cert", pki.clientCert)...); code != 2 || !strings.Contains(errOut, "--tls-key") {
		t.Errorf("--tls-cert without --tls-key: exit %d: %s (want a usage error naming --tls-key)", code, errOut)
	}
	t.Setenv("IDGEN_TLS_CA", pki.ca)
	t.Setenv("IDGEN_TLS_CERT", pki.clientCert)
	t.Setenv("IDGEN_TLS_KEY", pki.clientKey)
	code, out, errOut = runCLI(t, "parse", "--addr", node.RPCAddr, strconv.FormatInt(id, 10))
	if code != 0 {
		t.Fatalf("idctl parse --addr over TLS from the environment: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "worker") {
		t.Errorf("parse output %q", out)
	}
}
