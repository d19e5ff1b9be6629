package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/idgen/idgen/internal/secretfile"
)

// secretFlags is one secret of a command in the two forms idgen itself
// takes it, named as idgen names them (server/config.go): the value,
// --admin-token (env IDGEN_ADMIN_TOKEN), and a file holding it,
// --admin-token-file (env IDGEN_ADMIN_TOKEN_FILE). Every command that
// needs the secret takes both, so exporting a node's own variables makes
// idctl work against it.
//
// The command line is read before the environment, as a whole: a form
// given as a flag leaves the variables unread. Both forms at one level
// are refused with a message naming both, as idgen refuses them, rather
// than one silently winning.
type secretFlags struct {
	fs          *cmdFlags
	flag, env   string // "admin-token", "IDGEN_ADMIN_TOKEN"; the file form adds -file, _FILE
	value, file *string
	// oldEnv is a deprecated name of the value form's variable, read when
	// neither of env's forms is set, with a deprecation line.
	oldEnv string
}

// secret registers --flag and --flag-file on c. what names the secret in
// the help ("admin token"); valueHelp says more about the value form.
func (c *cmdFlags) secret(flag, env, what, valueHelp string) *secretFlags {
	return &secretFlags{fs: c, flag: flag, env: env,
		value: c.String(flag, "", fmt.Sprintf("%s (env %s)%s", what, env, valueHelp)),
		file:  c.String(flag+"-file", "", fmt.Sprintf("`file` holding the %s (env %s_FILE)", strings.ReplaceAll(what, "`", ""), env)),
	}
}

// preferFile is the valueHelp of a secret that should not be a flag.
func preferFile(flag string) string {
	return "; prefer --" + flag + "-file: a flag is visible to other users in the process list"
}

// get returns the secret, "" when given in no form. A file named is read
// and trimmed, and must not be empty.
func (s *secretFlags) get() (string, error) {
	if s.fs.given(s.flag) || s.fs.given(s.flag+"-file") {
		v, err := pickSecret(*s.value, "--"+s.flag, *s.file, "--"+s.flag+"-file")
		return v, s.fs.withUsage(err)
	}
	v, err := envSecret(s.env)
	if v != "" || err != nil || s.oldEnv == "" || os.Getenv(s.env+"_FILE") != "" {
		return v, s.fs.withUsage(err)
	}
	if old := os.Getenv(s.oldEnv); old != "" {
		deprecationNote(s.fs.stderr, s.oldEnv, s.env+" or "+s.env+"_FILE")
		return old, nil
	}
	return "", nil
}

// envSecret returns the secret in the environment variable env, else in
// the file named by env_FILE; both set is refused.
func envSecret(env string) (string, error) {
	return pickSecret(os.Getenv(env), env, os.Getenv(env+"_FILE"), env+"_FILE")
}

// pickSecret returns value, or the content of file; given both it refuses,
// naming both by valueName and fileName.
func pickSecret(value, valueName, file, fileName string) (string, error) {
	switch {
	case value != "" && file != "":
		return "", usageError{fmt.Errorf("%s and %s are both given: keep one (%s keeps the secret out of the process list)", valueName, fileName, fileName)}
	case file != "":
		return readSecretFile(file, fileName)
	}
	return value, nil
}

// readSecretFile reads a secret from a file (a token, a DSN, a ZooKeeper
// credential), trimmed; what names the setting in errors. Unlike idgen,
// idctl does not check the file's mode and owner
// (secretfile.ReadStringUnchecked).
func readSecretFile(path, what string) (string, error) {
	v, err := secretfile.ReadStringUnchecked(path)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("%s %s: %w (run idctl as the node's user, or give a copy you may read)", what, path, err)
	case err != nil:
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}
