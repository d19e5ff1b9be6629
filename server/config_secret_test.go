package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFiles: every secret can come from a file (kept out of
// /proc/PID/cmdline and the environment), trimmed; giving both forms, an
// empty file or a missing one is refused naming the setting.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	admin := write("admin", "  admin-token-0123456789abcdef\n")
	client := write("client", "client-token-0123456789abcdef\n")
	dsn := write("dsn", "u:secret@tcp(127.0.0.1:1)/idgen\n")
	zkAuth := write("zk", "user:pw\n")
	cfg, err := loadConfig([]string{"--admin-token-file", admin, "--client-token-file", client, "--mysql-file", dsn,
		"--zk-auth-file", zkAuth}, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminToken != "admin-token-0123456789abcdef" || cfg.ClientToken != "client-token-0123456789abcdef" ||
		cfg.MySQL != "u:secret@tcp(127.0.0.1:1)/idgen" || cfg.ZKAuth != "user:pw" {
		t.Fatalf("secrets read: admin %q client %q mysql %q zk %q", cfg.AdminToken, cfg.ClientToken, cfg.MySQL, cfg.ZKAuth)
	}
	// The environment twins work too.
	env := map[string]string{"IDGEN_MYSQL_FILE": dsn}
	cfg, err = loadConfig(nil, func(k string) string { return env[k] }, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || cfg.MySQL != "u:secret@tcp(127.0.0.1:1)/idgen" {
		t.Fatalf("IDGEN_MYSQL_FILE: mysql %q, %v", cfg.MySQL, err)
	}
	empty := write("empty", " \n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mysql", "u:p@tcp(h:1)/d", "--mysql-file", dsn}, "mysql and mysql_file are both set"},
		{[]string{"--admin-token", "admin-token-0123456789abcdef", "--admin-token-file", admin}, "admin_token and admin_token_file"},
		{[]string{"--client-token-file", empty}, "client_token_file " + empty + " is empty"},
		{[]string{"--zk-auth-file", filepath.Join(dir, "missing")}, "zk_auth_file"},
	} {
		_, err := loadConfig(tc.args, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a refusal containing %q", tc.args, err, tc.want)
		}
	}
}

// TestShortTokensRefused: a token under 16 bytes can be guessed over the
// network; it is refused at start, from a flag or a file.
func TestShortTokensRefused(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("tooshort\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--admin-token", "secret"}, {"--client-token", "123456789012345"}, {"--admin-token-file", short}} {
		_, err := loadConfig(args, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "at least 16 needed") {
			t.Errorf("%v: %v, want a refusal asking for 16", args, err)
		}
	}
	if _, err := loadConfig([]string{"--client-token", "1234567890123456"}, noEnv, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Errorf("a 16-byte token: %v", err)
	}
}

// TestTransportSettingsValidated: TLS halves, connection limits.
func TestTransportSettingsValidated(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", "c.pem"}, "tls_cert/tls_key"},
		{[]string{"--tls-client-ca", "ca.pem"}, "tls_client_ca"},
		{[]string{"--max-connections", "0"}, "max_connections"},
		{[]string{"--conn-idle-timeout", "0s"}, "conn_idle_timeout"},
		{[]string{"--auto-create-max", "0"}, "auto_create_max"},
		{[]string{"--metrics-max-bizs", "0"}, "metrics_max_bizs"},
	} {
		_, err := loadConfig(tc.args, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a refusal naming %s", tc.args, err, tc.want)
		}
	}
}
