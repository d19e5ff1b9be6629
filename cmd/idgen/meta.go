package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/idgen/idgen/worker"
)

// standaloneMeta reads the snowflake settings a standalone node's data dir
// was created with (data_dir/cluster.json), creating the file on first start.
// A standalone node has no ZooKeeper to hold cluster settings, and changing
// the epoch or bit split under existing IDs could reissue them, so a
// mismatch refuses to start, exactly as a cluster node's would. created_ms
// is when the data dir was first used: the snowflake floor derives from it.
func standaloneMeta(dir string, want worker.Meta, now time.Time) (worker.Meta, error) {
	path := filepath.Join(dir, "cluster.json")
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		want.CreatedMs = now.UnixMilli()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return worker.Meta{}, fmt.Errorf("data dir: %w", err)
		}
		buf, _ := json.MarshalIndent(want, "", "  ")
		if err := writeFileSync(path, append(buf, '\n')); err != nil {
			return worker.Meta{}, fmt.Errorf("writing %s: %w", path, err)
		}
		return want, nil
	}
	if err != nil {
		return worker.Meta{}, fmt.Errorf("reading %s: %w", path, err)
	}
	var have worker.Meta
	if err := json.Unmarshal(raw, &have); err != nil {
		return worker.Meta{}, fmt.Errorf("%s is not valid JSON (%v): restore it from backup; do not delete it, it fixes the snowflake layout of this data dir", path, err)
	}
	switch {
	case have.EpochMs != want.EpochMs:
		return worker.Meta{}, fmt.Errorf("epoch differs from the data dir's (%s in %s, %s configured): IDs could repeat; configure the data dir's epoch",
			time.UnixMilli(have.EpochMs).UTC().Format(time.RFC3339), path, time.UnixMilli(want.EpochMs).UTC().Format(time.RFC3339))
	case have.IDCBits != want.IDCBits || have.NodeBits != want.NodeBits:
		return worker.Meta{}, fmt.Errorf("bit split differs from the data dir's (idc_bits=%d node_bits=%d in %s, %d/%d configured): configure the data dir's split",
			have.IDCBits, have.NodeBits, path, want.IDCBits, want.NodeBits)
	}
	return have, nil
}

// writeFileSync writes path atomically: temp file, fsync, rename, fsync dir.
func writeFileSync(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
