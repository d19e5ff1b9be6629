package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/idgen/idgen/internal/testnode"
)

// TestGetOverTLS: idctl get speaks TLS with --tls-ca (and mutual TLS with
// --tls-cert/--tls-key); without them it cannot talk to a TLS node; parse
// (newClient) speaks TLS from IDGEN_TLS_CA alone.
func TestGetOverTLS(t *testing.T) {
	cleanEnv(t)
	for _, k := range []string{"IDGEN_TLS_CA", "IDGEN_TLS_CERT", "IDGEN_TLS_KEY", "IDGEN_TLS_SERVER_NAME"} {
		t.Setenv(k, "")
	}
	pki := testnode.NewPKI(t)
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey,
		"--tls-client-ca", pki.CA}})
	base := []string{"get", "--addr", node.RPCAddr, "--biz", "tls", "--channel", "snowflake", "--timeout", "2s"}
	code, out, errOut := runCLI(t, append(base, "--tls-ca", pki.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey)...)
	if code != 0 {
		t.Fatalf("idctl get over mutual TLS: exit %d: %s", code, errOut)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || id <= 0 {
		t.Fatalf("output %q: want one ID", out)
	}
	if code, _, _ := runCLI(t, append(base, "--tls-ca", pki.CA)...); code == 0 {
		t.Errorf("idctl get without a client certificate succeeded against --tls-client-ca")
	}
	if code, _, _ := runCLI(t, base...); code == 0 {
		t.Errorf("idctl get in plaintext succeeded against a TLS node")
	}
	if code, _, errOut := runCLI(t, append(base, "--tls-ca", pki.CA, "--tls-cert", pki.ClientCert)...); code != 2 || !strings.Contains(errOut, "--tls-key") {
		t.Errorf("--tls-cert without --tls-key: exit %d: %s (want a usage error naming --tls-key)", code, errOut)
	}
	t.Setenv("IDGEN_TLS_CA", pki.CA)
	t.Setenv("IDGEN_TLS_CERT", pki.ClientCert)
	t.Setenv("IDGEN_TLS_KEY", pki.ClientKey)
	code, out, errOut = runCLI(t, "parse", "--addr", node.RPCAddr, strconv.FormatInt(id, 10))
	if code != 0 {
		t.Fatalf("idctl parse --addr over TLS from the environment: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "worker") {
		t.Errorf("parse output %q", out)
	}
}
