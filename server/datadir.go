package server

import (
	"fmt"
	"io/fs"
	"os"

	"go.uber.org/zap"
)

// warnOpenDirs warns about a data or properties directory that users other
// than its owner can write: they could replace the worker properties file
// (the slot's high-water mark, so repeated snowflake IDs), the embedded
// store or the generated admin token. idgen creates these directories 0700;
// one that already exists is used as it is, so an operator's choice is
// kept but said out loud, with the chmod that fixes it. A directory that
// does not exist yet is skipped (it is created 0700).
func warnOpenDirs(cfg Config, log *zap.Logger) {
	seen := map[string]bool{}
	for _, d := range []struct{ setting, dir string }{{"data_dir", cfg.DataDir}, {"properties_dir", cfg.PropertiesDir}} {
		if d.dir == "" || seen[d.dir] {
			continue
		}
		seen[d.dir] = true
		fi, err := os.Stat(d.dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		if perm := fi.Mode().Perm(); openDir(perm) {
			log.Warn("directory writable by other users: they can change the worker slot's mark, the store or the admin token in it",
				zap.String("setting", d.setting), zap.String("dir", d.dir), zap.String("mode", fmt.Sprintf("%04o", perm)),
				zap.String("fix", "chmod 700 "+d.dir))
		}
	}
}

// openDir reports whether perm lets the group or others write (create,
// rename, delete entries in) the directory.
func openDir(perm fs.FileMode) bool { return perm&0o022 != 0 }
