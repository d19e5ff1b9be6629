package plugins

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAuditDirCreatedPrivate: the audit file's missing directory (by
// default the node's data directory) is created 0700.
func TestAuditDirCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a, err := OpenAudit(filepath.Join(dir, "audit.jsonl"), AuditConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(5 * time.Second)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("%s created with mode %04o, want 0700", dir, perm)
	}
}
