package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// tlsFlags are the TLS options of a command that calls a node started with
// --tls-cert: the CA to verify it, a client certificate for mutual TLS
// (--tls-client-ca on the node) and the name to verify when --addr is not
// one the certificate holds. Each defaults from its environment variable,
// so commands without the flags (biz, decode, parse) speak TLS through the
// environment alone.
type tlsFlags struct {
	ca, cert, key, serverName *string
}

// tlsEnv are the environment variables of the TLS options.
var tlsEnv = struct{ ca, cert, key, serverName string }{"IDGEN_TLS_CA", "IDGEN_TLS_CERT", "IDGEN_TLS_KEY", "IDGEN_TLS_SERVER_NAME"}

// addTLSFlags registers --tls-ca, --tls-cert, --tls-key and
// --tls-server-name on fs.
func addTLSFlags(fs *cmdFlags) *tlsFlags {
	return &tlsFlags{
		ca:         fs.String("tls-ca", envOr(tlsEnv.ca, ""), "PEM CA bundle: speak TLS and verify the node's certificate with it (env "+tlsEnv.ca+")"),
		cert:       fs.String("tls-cert", envOr(tlsEnv.cert, ""), "PEM client certificate for mutual TLS, with --tls-key (env "+tlsEnv.cert+")"),
		key:        fs.String("tls-key", envOr(tlsEnv.key, ""), "PEM private key of --tls-cert (env "+tlsEnv.key+")"),
		serverName: fs.String("tls-server-name", envOr(tlsEnv.serverName, ""), "name to verify in the node's certificate (default: the host of --addr; env "+tlsEnv.serverName+")"),
	}
}

// config returns the TLS configuration, or nil for plaintext when no TLS
// option is set. A nil f reads the environment only.
func (f *tlsFlags) config() (*tls.Config, error) {
	ca, cert, key, name := envOr(tlsEnv.ca, ""), envOr(tlsEnv.cert, ""), envOr(tlsEnv.key, ""), envOr(tlsEnv.serverName, "")
	if f != nil {
		ca, cert, key, name = *f.ca, *f.cert, *f.key, *f.serverName
	}
	if ca == "" && cert == "" && key == "" && name == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: name}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, usageError{fmt.Errorf("--tls-ca: %w", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageError{fmt.Errorf("--tls-ca %s: no PEM certificate in it", ca)}
		}
		tc.RootCAs = pool
	}
	switch {
	case (cert == "") != (key == ""):
		return nil, usageError{errors.New("--tls-cert and --tls-key go together (a client certificate and its key, for a node started with --tls-client-ca)")}
	case cert != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, usageError{fmt.Errorf("--tls-cert %s / --tls-key %s: %w", cert, key, err)}
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
