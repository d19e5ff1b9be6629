//go:build unix

package secretfile

import (
	"io/fs"
	"syscall"
)

// owner returns the file's user and group ids.
func owner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
