package boltstore

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDataDirCreatedPrivate: Open creates a missing data directory 0700,
// readable and writable by the node's user only.
func TestDataDirCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("%s created with mode %04o, want 0700", dir, perm)
	}
}
