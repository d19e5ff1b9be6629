package main

import (
	"fmt"
	"os"
	"strings"
)

// secretEnv returns the secret in the environment variable name, else the
// content (trimmed) of the file named by name+"_FILE", as the server reads
// its *_file settings: IDGEN_MYSQL_FILE=/etc/idgen/mysql.dsn keeps the
// password out of the command line and the environment. A file that
// cannot be read is an error naming it.
func secretEnv(name string) (string, error) {
	if v := os.Getenv(name); v != "" {
		return v, nil
	}
	f := os.Getenv(name + "_FILE")
	if f == "" {
		return "", nil
	}
	raw, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: %w", name, err)
	}
	return strings.TrimSpace(string(raw)), nil
}

// envSecretOr is secretEnv for flag defaults: a file that cannot be read
// leaves the default empty, and the command then says the setting is
// missing (naming both forms).
func envSecretOr(name string) string {
	v, err := secretEnv(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idctl:", err)
		return ""
	}
	return v
}
