// Package secretfile reads the files that hold idgen's secrets (the admin
// and client tokens, the MySQL DSN, the ZooKeeper credentials, the master
// key, the TLS private key) and refuses one that other local users could
// read or change: a secret every user of the host can read protects
// nothing, and one they can write lets them choose it.
//
// The rule: a file this process owns must be readable by its owner only
// (0600, 0400): it can always be made so. A file root provisioned for a
// non-root process may in addition show the group read bit (never group
// write, never any bit for others) in the two places that hand secrets
// over that way, where nobody else can read them:
//   - Kubernetes: a Secret volume's files are root's, group fsGroup, and
//     get the group read bit whatever defaultMode says (0400 becomes
//     0440); accepted when the file's group is this process's own
//     non-root effective group (runAsGroup equal to fsGroup).
//   - systemd: LoadCredential= writes root's 0400 files and grants the
//     service's user read with a POSIX ACL, which stat shows as 0440 (the
//     ACL mask in the group bits); accepted directly in
//     $CREDENTIALS_DIRECTORY.
package secretfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// MaxBytes is the most of a secret file that is read: secrets are short,
// and a path pointing at a large file by mistake must not fill the heap.
const MaxBytes = 64 << 10

// Read opens the secret file at path, checks the open file (what is checked
// is what is read, even if path is a symlink replaced meanwhile, as in a
// Kubernetes Secret volume) and returns its content, at most MaxBytes.
func Read(path string) ([]byte, error) { return read(path, true) }

func read(path string, check bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if check {
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if err := Check(path, fi); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, MaxBytes))
}

// ReadString is Read for a secret that is one line of text (a token, a
// DSN, ZooKeeper's user:password): the content with its surrounding
// whitespace trimmed (the newline an editor or echo leaves), refused when
// nothing is left.
func ReadString(path string) (string, error) { return readString(path, true) }

// ReadStringUnchecked is ReadString without Check, for a tool an operator
// runs (idctl), not a process that holds the secret: root reading the
// node's own 0600 file, owned by the node's user, is what Check refuses
// and what the operator means. The bound, the trimming and the refusal of
// an empty file are ReadString's.
func ReadStringUnchecked(path string) (string, error) { return readString(path, false) }

func readString(path string, check bool) (string, error) {
	raw, err := read(path, check)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(raw))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// Fill sets *val to the secret in the file at path (ReadString) when path
// is set: the *File twin of a secret setting. valName and fileName name
// the two settings in errors. Both forms given is refused: which one wins
// would be a guess.
func Fill(val *string, path, valName, fileName string) error {
	if path == "" {
		return nil
	}
	if *val != "" {
		return fmt.Errorf("%s and %s are both set: keep only %s (a secret in a file stays out of command lines, environments and configuration)",
			valName, fileName, fileName)
	}
	v, err := ReadString(path)
	if err != nil {
		return fmt.Errorf("%s: %w", fileName, err)
	}
	*val = v
	return nil
}

// Check refuses a file whose mode or ownership lets users other than this
// process's read or change it (the package's rule), and anything but a
// regular file. The error names the chmod that fixes it.
func Check(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%v): point the setting at the file that holds the secret", path, fi.Mode().Type())
	}
	if runtime.GOOS == "windows" { // no Unix permission bits to check
		return nil
	}
	uid, gid, known := owner(fi)
	inCreds := false
	if d := os.Getenv("CREDENTIALS_DIRECTORY"); d != "" {
		inCreds = filepath.Clean(filepath.Dir(path)) == filepath.Clean(d)
	}
	return check(path, fi.Mode().Perm(), uid, gid, known, os.Geteuid(), os.Getegid(), inCreds)
}

// check is Check's rule on a file of mode perm owned by uid:gid (known:
// the platform reports owners), read by a process of euid and egid;
// inCreds: the file is directly in systemd's $CREDENTIALS_DIRECTORY.
func check(path string, perm fs.FileMode, uid, gid int, known bool, euid, egid int, inCreds bool) error {
	if perm&0o077 == 0 {
		return nil
	}
	// Group read only, on a file root provisioned for this non-root process.
	if perm&0o037 == 0 && known && uid == 0 && euid != 0 && ((gid == egid && egid != 0) || inCreds) {
		return nil
	}
	return fmt.Errorf("%s has mode %04o: other users can read or change it; run chmod 600 %s (a secret must be readable by its owner only; on Kubernetes mount the Secret with defaultMode 0400 and runAsGroup equal to fsGroup)",
		path, perm, path)
}
