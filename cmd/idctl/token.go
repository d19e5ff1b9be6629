package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// adminTokenFile is the file in a node's data dir holding the admin token
// the node generated at its first start.
const adminTokenFile = "admin.token"

// adminTokenHelp is how idctl finds the admin token, for help texts and
// the error when it finds none.
const adminTokenHelp = `The admin token is, in this order: --token (env IDGEN_ADMIN_TOKEN), the
file --token-file (env IDGEN_ADMIN_TOKEN_FILE), $IDGEN_DATA_DIR/admin.token,
or ./data/admin.token. A node started without an admin token generates
<data_dir>/admin.token (mode 0600) at its first start, so on the node's host,
in the directory the node was started from, no flag is needed.
`

// tokenFlags are the admin token flags of an admin command.
type tokenFlags struct {
	token, file *string
}

// addAdminTokenFlags adds --token and --token-file to fs.
func addAdminTokenFlags(fs *cmdFlags) tokenFlags {
	return tokenFlags{
		token: fs.String("token", os.Getenv("IDGEN_ADMIN_TOKEN"), "admin `token` (env IDGEN_ADMIN_TOKEN); prefer --token-file: a flag is visible to other users in the process list"),
		file:  fs.String("token-file", os.Getenv("IDGEN_ADMIN_TOKEN_FILE"), "`file` holding the admin token (env IDGEN_ADMIN_TOKEN_FILE; default: $IDGEN_DATA_DIR/admin.token, then ./data/admin.token)"),
	}
}

// resolve returns the admin token (see adminTokenHelp), or an error naming
// the ways to give one.
func (f tokenFlags) resolve() (string, error) {
	return resolveAdminToken(*f.token, *f.file, os.Getenv("IDGEN_DATA_DIR"))
}

// resolveAdminToken finds the admin token: token, else the file named by
// file, else admin.token in dataDir (when set), else in ./data. A file
// named explicitly must be readable; a default place that does not exist
// is skipped.
func resolveAdminToken(token, file, dataDir string) (string, error) {
	if token != "" {
		return token, nil
	}
	if file != "" {
		return readTokenFile(file, "--token-file")
	}
	var tried []string
	for _, dir := range []string{dataDir, "data"} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, adminTokenFile)
		tok, err := readTokenFile(p, "the node's admin token")
		if errors.Is(err, fs.ErrNotExist) {
			tried = append(tried, p)
			continue
		}
		return tok, err
	}
	return "", fmt.Errorf("no admin token: give --token-file FILE (env IDGEN_ADMIN_TOKEN_FILE) or --token (env IDGEN_ADMIN_TOKEN), "+
		"or run idctl on the node's host with IDGEN_DATA_DIR set to its data dir or from the directory it was started in "+
		"(the node writes <data_dir>/admin.token at its first start); not found: %s", strings.Join(tried, ", "))
}

// readTokenFile reads a token file; what names it in errors.
func readTokenFile(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("%s %s: %w (run idctl as the node's user, or give --token-file with a copy you may read)", what, path, err)
	case err != nil:
		return "", fmt.Errorf("%s: %w", what, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s %s is empty", what, path)
	}
	return tok, nil
}

// clientTokenFlags are the client token flags of the commands that call
// ParseID, Clock or ListWorkers.
type clientTokenFlags struct {
	token, file *string
}

// addClientTokenFlags adds --client-token and --client-token-file to fs.
func addClientTokenFlags(fs *cmdFlags) clientTokenFlags {
	return clientTokenFlags{
		token: fs.String("client-token", os.Getenv("IDGEN_CLIENT_TOKEN"), "client `token`, when the node requires one (env IDGEN_CLIENT_TOKEN; default: the admin token if one is found, which nodes accept there too)"),
		file:  fs.String("client-token-file", os.Getenv("IDGEN_CLIENT_TOKEN_FILE"), "`file` holding the client token (env IDGEN_CLIENT_TOKEN_FILE)"),
	}
}

// resolve returns the token to send ("" for none): the client token given,
// else the admin token if one is found (a node accepts it on ParseID, Clock
// and ListWorkers), else none, for a node without a client token.
func (f clientTokenFlags) resolve() (string, error) {
	if *f.token != "" {
		return *f.token, nil
	}
	if *f.file != "" {
		return readTokenFile(*f.file, "--client-token-file")
	}
	tok, err := resolveAdminToken(os.Getenv("IDGEN_ADMIN_TOKEN"), os.Getenv("IDGEN_ADMIN_TOKEN_FILE"), os.Getenv("IDGEN_DATA_DIR"))
	if err != nil {
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
