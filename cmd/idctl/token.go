package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/idgen/idgen/internal/idctlenv"
)

// adminTokenFile is the file in a node's data dir holding the admin token
// the node generated at its first start.
const adminTokenFile = "admin.token"

// adminTokenHelp is how idctl finds the admin token, for help texts and
// the error when it finds none.
const adminTokenHelp = `The admin token is, in this order: --admin-token-file or --admin-token,
else IDGEN_ADMIN_TOKEN_FILE or IDGEN_ADMIN_TOKEN (the node's own settings),
else $IDGEN_DATA_DIR/admin.token, else ./data/admin.token. A node started
without an admin token generates <data_dir>/admin.token (mode 0600) at its
first start, so on the node's host, in the directory the node was started
from, no flag is needed. (--token and --token-file are the old spellings.)
`

// adminTokenFlags are the admin token flags of an admin command.
type adminTokenFlags struct{ *secretFlags }

// addAdminTokenFlags adds --admin-token and --admin-token-file to fs, and
// their old spellings --token and --token-file.
func addAdminTokenFlags(fs *cmdFlags) adminTokenFlags {
	s := fs.secret("admin-token", idctlenv.AdminToken, "admin `token`", preferFile("admin-token")+
		"; neither given: $IDGEN_DATA_DIR/admin.token, then ./data/admin.token")
	fs.deprecated("token", "admin-token")
	fs.deprecated("token-file", "admin-token-file")
	return adminTokenFlags{s}
}

// resolve returns the admin token (see adminTokenHelp), or an error naming
// the ways to give one.
func (f adminTokenFlags) resolve() (string, error) {
	tok, err := f.get()
	if err != nil {
		return "", err
	}
	return findAdminToken(tok, os.Getenv(idctlenv.DataDir))
}

// findAdminToken returns token when given, else the admin token a node
// wrote: admin.token in dataDir (when set), else in ./data. A default
// place that does not exist is skipped.
func findAdminToken(token, dataDir string) (string, error) {
	if token != "" {
		return token, nil
	}
	var tried []string
	for _, dir := range []string{dataDir, "data"} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, adminTokenFile)
		tok, err := readSecretFile(p, "the node's admin token")
		if errors.Is(err, fs.ErrNotExist) {
			tried = append(tried, p)
			continue
		}
		return tok, err
	}
	return "", fmt.Errorf("no admin token: give --admin-token-file FILE (env IDGEN_ADMIN_TOKEN_FILE) or --admin-token (env IDGEN_ADMIN_TOKEN), "+
		"or run idctl on the node's host with IDGEN_DATA_DIR set to its data dir or from the directory it was started in "+
		"(the node writes <data_dir>/admin.token at its first start); not found: %s", strings.Join(tried, ", "))
}

// clientTokenFlags are the client token flags of the commands that call
// NextIDs, ParseID, Clock or ListWorkers.
type clientTokenFlags struct{ *secretFlags }

// addClientTokenFlags adds --client-token and --client-token-file to fs
// (env IDGEN_CLIENT_TOKEN and IDGEN_CLIENT_TOKEN_FILE, the node's own
// settings). extra ends the help of --client-token.
func addClientTokenFlags(fs *cmdFlags, extra string) clientTokenFlags {
	return clientTokenFlags{fs.secret("client-token", idctlenv.ClientToken, "client `token`, when the node requires one", preferFile("client-token")+extra)}
}

// addOldClientTokenFlags is addClientTokenFlags for get and bench, which
// took the client token as --token (env IDGEN_TOKEN) before: both are
// read for one more release, with a deprecation line.
func addOldClientTokenFlags(fs *cmdFlags) clientTokenFlags {
	f := addClientTokenFlags(fs, "")
	fs.deprecated("token", "client-token")
	f.oldEnv = idctlenv.Token
	return f
}

// orAdmin returns the client token given, else the admin token if one is
// found (a node accepts it on ParseID, Clock and ListWorkers), else ""
// (for a node without a client token).
func (f clientTokenFlags) orAdmin() (string, error) {
	tok, err := f.get()
	if tok != "" || err != nil {
		return tok, err
	}
	admin, err := envSecret(idctlenv.AdminToken)
	if err != nil {
		return "", err
	}
	if tok, err = findAdminToken(admin, os.Getenv(idctlenv.DataDir)); err != nil {
		return "", nil // no admin token at hand: call without a token
	}
	return tok, nil
}

// optional returns &s, or nil for "" (an unset Thrift optional field).
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
