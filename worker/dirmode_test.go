package worker

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPropertiesDirCreatedPrivate: the properties directory (the data dir
// of a cluster node) is created 0700, not 0755: the file holds the slot's
// mark, and a node whose mark another user rewrites repeats IDs.
func TestPropertiesDirCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "data")
	if err := writeFileAtomic(filepath.Join(dir, "idgen.properties"), []byte("x=1\n")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o700 {
			t.Errorf("%s created with mode %04o, want 0700", d, perm)
		}
	}
}
