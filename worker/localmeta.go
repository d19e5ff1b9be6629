package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// LocalMetaFile is the name of a standalone node's cluster settings file
// inside its data dir.
const LocalMetaFile = "cluster.json"

// LocalMeta reads the snowflake settings a standalone node's data dir was
// created with (<dir>/cluster.json), creating the file with want and
// CreatedMs = now on first start. A standalone node has no ZooKeeper to
// hold cluster settings, and changing the epoch or bit split under existing
// IDs could reissue them, so a mismatch is refused exactly as a cluster
// node's would be (ErrMetaMismatch naming the setting). CreatedMs is when
// the data dir was first used: the snowflake floor derives from it.
func LocalMeta(dir string, want Meta, now time.Time) (Meta, error) {
	want = want.withDefaults()
	path := filepath.Join(dir, LocalMetaFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		want.CreatedMs = now.UnixMilli()
		buf, _ := json.MarshalIndent(want, "", "  ")
		if err := writeFileAtomic(path, append(buf, '\n')); err != nil {
			return Meta{}, err
		}
		return want, nil
	}
	if err != nil {
		return Meta{}, fmt.Errorf("reading %s: %w", path, err)
	}
	var have Meta
	if err := json.Unmarshal(raw, &have); err != nil {
		return Meta{}, fmt.Errorf("%s is not valid JSON (%v): restore it from backup; do not delete it, it fixes the snowflake layout of this data dir", path, err)
	}
	if err := compareMeta(have, want, path); err != nil {
		return Meta{}, err
	}
	return have, nil
}
