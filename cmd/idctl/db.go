package main

import (
	"context"
	"errors"
	"io"
)

// cmdDB is not implemented yet.
func cmdDB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("idctl db: not implemented yet")
}
