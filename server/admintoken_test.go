package server

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestAdminTokenGeneratedOnceAndReused: with no admin token configured, the
// first start creates the data dir (0700) and <data_dir>/admin.token (0600)
// holding 32 random bytes in base64url; the next start reads the same
// token; the log names the file, never the token.
func TestAdminTokenGeneratedOnceAndReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	core, logs := observer.New(zapcore.InfoLevel)
	tok, err := adminTokenFor(Config{DataDir: dir}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(raw) != 32 {
		t.Fatalf("token %q: %d bytes, %v; want 32 random bytes in base64url", tok, len(raw), err)
	}
	path := filepath.Join(dir, "admin.token")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %04o, want 0600", path, st.Mode().Perm())
	}
	if dst, _ := os.Stat(dir); dst.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %04o, want 0700", dst.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != tok {
		t.Errorf("file holds %q, want the token", b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".admin.token.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	again, err := adminTokenFor(Config{DataDir: dir}, zap.New(core))
	if err != nil || again != tok {
		t.Fatalf("second start: %q, %v; want the same token", again, err)
	}
	entries := logs.AllUntimed()
	if len(entries) != 2 || !strings.Contains(entries[0].Message, "generated") || strings.Contains(entries[1].Message, "generated") {
		t.Fatalf("log: %+v; want one line per start, the first saying generated", entries)
	}
	for _, e := range entries {
		if e.ContextMap()["file"] != path {
			t.Errorf("log line %q: file %v, want %s", e.Message, e.ContextMap()["file"], path)
		}
		if strings.Contains(e.Message, tok) {
			t.Errorf("the token was logged: %q", e.Message)
		}
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, tok) {
				t.Errorf("the token was logged in field %s", k)
			}
		}
	}
}

// TestAdminTokenConfiguredWins: a configured token is used as it is and no
// file is written.
func TestAdminTokenConfiguredWins(t *testing.T) {
	dir := t.TempDir()
	tok, err := adminTokenFor(Config{DataDir: dir, AdminToken: "configured-token-0123456789"}, zap.NewNop())
	if err != nil || tok != "configured-token-0123456789" {
		t.Fatalf("%q, %v", tok, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "admin.token")); !os.IsNotExist(err) {
		t.Errorf("admin.token written although a token is configured: %v", err)
	}
	if _, err := adminTokenFor(Config{}, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Errorf("no token and no data dir: %v; want a refusal naming --admin-token-file", err)
	}
}

// TestAdminTokenFileRefused: an existing admin.token that others may read,
// or that holds no usable token, stops the start with what to do; it is
// never replaced silently.
func TestAdminTokenFileRefused(t *testing.T) {
	for _, c := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    []string
	}{
		{"group readable", strings.Repeat("x", 43), 0o640, []string{"chmod 600", "group or others"}},
		{"world readable", strings.Repeat("x", 43), 0o644, []string{"chmod 600"}},
		{"empty", "\n", 0o600, []string{"is empty", "delete it"}},
		{"short", "short-token\n", 0o600, []string{"holds 11 bytes", "at least 16"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "admin.token")
			if err := os.WriteFile(path, []byte(c.content), c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			_, err := adminTokenFor(Config{DataDir: dir}, zap.NewNop())
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range append(c.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if b, _ := os.ReadFile(path); string(b) != c.content {
				t.Errorf("the file was changed to %q", b)
			}
		})
	}
}
