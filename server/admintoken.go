package server

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
)

// adminTokenFileName is the file in the data dir that holds the admin token
// a node generated for itself. idctl reads it from there on the node's
// host, so operators there need no extra step.
const adminTokenFileName = "admin.token"

// adminTokenBytes is the entropy of a generated admin token: 32 random
// bytes, far beyond guessing over a network.
const adminTokenBytes = 32

// adminTokenFor returns the token every admin RPC must carry. An address
// proves nothing (Kitex lets a TTHeader header claim any caller address),
// so there is always a token: the configured one (--admin-token-file,
// --admin-token or their IDGEN_* twins), else the one in
// <data_dir>/admin.token, generated at the first start. The token itself is
// never logged, only where it is.
func adminTokenFor(cfg Config, log *zap.Logger) (string, error) {
	if cfg.AdminToken != "" {
		src := "admin_token"
		if cfg.AdminTokenFile != "" {
			src = cfg.AdminTokenFile
		}
		log.Info("admin RPCs require the configured admin token", zap.String("source", src))
		return cfg.AdminToken, nil
	}
	if cfg.DataDir == "" {
		return "", errors.New("no admin token: set --admin-token-file (IDGEN_ADMIN_TOKEN_FILE), or --data-dir so that the node generates one into data-dir/" + adminTokenFileName)
	}
	path := filepath.Join(cfg.DataDir, adminTokenFileName)
	tok, created, err := loadOrCreateAdminToken(path)
	if err != nil {
		return "", err
	}
	msg := "admin RPCs require the admin token in this file (idctl on this host reads it by itself)"
	if created {
		msg = "admin token generated: admin RPCs require the token in this file (idctl on this host reads it by itself)"
	}
	log.Info(msg, zap.String("file", path))
	return tok, nil
}

// loadOrCreateAdminToken reads the admin token file at path, or creates it
// (mode 0600, its directory 0700 when missing) with a fresh random token.
// created reports which. An existing file is used as it is, so the token
// survives restarts; one that others can read, or that holds no usable
// token, is refused rather than silently replaced: the operator decides.
func loadOrCreateAdminToken(path string) (tok string, created bool, err error) {
	tok, err = readAdminTokenFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false, fmt.Errorf("creating %s for the admin token: %w", dir, err)
	}
	raw := make([]byte, adminTokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("generating the admin token: %w", err)
	}
	tok = base64.RawURLEncoding.EncodeToString(raw)
	// Written whole to a temporary file (CreateTemp makes it 0600), then
	// put in place in one step: a crash never leaves a partial token.
	f, err := os.CreateTemp(dir, "."+adminTokenFileName+".*")
	if err != nil {
		return "", false, fmt.Errorf("writing the admin token into %s: %w", dir, err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // a no-op once linked or renamed away
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("writing the admin token to %s: %w", tmp, err)
	}
	// Link, unlike rename, never replaces a file: when two processes
	// start on one data dir at once, the second reads the first one's
	// token instead of overwriting a token the first already serves with.
	// A file system without hard links gets the rename.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			tok, err = readAdminTokenFile(path)
			return tok, false, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return "", false, fmt.Errorf("writing the admin token to %s: %w", path, err)
		}
	}
	syncDir(dir)
	return tok, true, nil
}

// readAdminTokenFile reads an existing admin token file and checks that it
// is private and holds a token long enough. A missing file is reported as
// fs.ErrNotExist.
func readAdminTokenFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("admin token file %s is not a regular file: remove it (a new token is then generated) or set --admin-token-file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("admin token file %s is readable or writable by group or others (mode %04o): run chmod 600 %s, or delete it to have a new token generated", path, perm, path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token file: %w", err)
	}
	tok := strings.TrimSpace(string(raw))
	if len(tok) < MinTokenBytes {
		what := fmt.Sprintf("holds %d bytes, at least %d needed", len(tok), MinTokenBytes)
		if tok == "" {
			what = "is empty"
		}
		return "", fmt.Errorf("admin token file %s %s: delete it to have a new token generated, or write a longer one (head -c 32 /dev/urandom | base64)", path, what)
	}
	return tok, nil
}

// syncDir makes a new directory entry durable; best effort (some file
// systems refuse fsync on a directory, and the token file is rewritten at
// the next start if it was lost).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
