package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestSecretFilesMustBePrivate: every secret file (the tokens, the MySQL
// DSN, the ZooKeeper credentials, the TLS private key) is refused at start
// when other users can read or change it, naming the setting and the chmod
// that fixes it, as the master key already was; at 0600 it is read. (The
// code before this test read all of them at 0644.)
func TestSecretFilesMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile's mode is masked by the umask
			t.Fatal(err)
		}
		return p
	}
	cert := write("tls.crt", "not read by loadConfig", 0o644)
	for _, c := range []struct {
		setting, flag, content string
		extra                  []string
	}{
		{"admin_token_file", "--admin-token-file", "admin-token-0123456789abcdef", nil},
		{"client_token_file", "--client-token-file", "client-token-0123456789abcdef", nil},
		{"mysql_file", "--mysql-file", "u:secret@tcp(127.0.0.1:1)/idgen", nil},
		{"zk_auth_file", "--zk-auth-file", "user:pw", nil},
		{"tls_key", "--tls-key", "-----BEGIN PRIVATE KEY-----", []string{"--tls-cert", cert}},
	} {
		for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
			p := write(c.setting+mode.String(), c.content, mode)
			_, err := loadConfig(append([]string{c.flag, p}, c.extra...), noEnv, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), c.setting) || !strings.Contains(err.Error(), "chmod 600 "+p) {
				t.Errorf("%s at %04o: %v, want a refusal naming %s and chmod 600 %s", c.flag, mode, err, c.setting, p)
			}
		}
		p := write(c.setting+"-private", c.content, 0o600)
		if _, err := loadConfig(append([]string{c.flag, p}, c.extra...), noEnv, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
			t.Errorf("%s at 0600: %v", c.flag, err)
		}
	}
}

// TestWarnOpenDataDir: a data or properties directory that group or
// others can write is used, but said out loud with the chmod that fixes
// it (the code before this test said nothing about a 0777 data dir); a
// 0700 or 0755 one, or one not created yet, is not warned about.
func TestWarnOpenDataDir(t *testing.T) {
	mk := func(mode os.FileMode) string {
		d := t.TempDir()
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	open, groupW, private, readable := mk(0o777), mk(0o770), mk(0o700), mk(0o755)
	core, logs := observer.New(zapcore.WarnLevel)
	warnOpenDirs(Config{DataDir: open, PropertiesDir: groupW}, zap.New(core))
	warnOpenDirs(Config{DataDir: private, PropertiesDir: readable}, zap.New(core))
	warnOpenDirs(Config{DataDir: filepath.Join(private, "missing")}, zap.New(core))
	got := logs.TakeAll()
	if len(got) != 2 {
		t.Fatalf("%d warnings, want 2 (the 0777 data dir, the 0770 properties dir): %v", len(got), got)
	}
	for i, want := range []struct{ setting, dir, mode string }{{"data_dir", open, "0777"}, {"properties_dir", groupW, "0770"}} {
		f := got[i].ContextMap()
		if f["setting"] != want.setting || f["dir"] != want.dir || f["mode"] != want.mode || f["fix"] != "chmod 700 "+want.dir {
			t.Errorf("warning %d: %v, want setting %s dir %s mode %s fix chmod 700", i, f, want.setting, want.dir, want.mode)
		}
	}
}
