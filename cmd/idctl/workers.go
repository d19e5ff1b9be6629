package main

import (
	"context"
	"errors"
	"io"
)

// cmdWorkers is not implemented yet.
func cmdWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("idctl workers: not implemented yet")
}
