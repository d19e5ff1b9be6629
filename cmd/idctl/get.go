package main

import (
	"context"
	"errors"
	"io"
)

// cmdGet is not implemented yet.
func cmdGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("idctl get: not implemented yet")
}
