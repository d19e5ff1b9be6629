package main

import (
	"context"
	"errors"
	"io"
)

// cmdBench is not implemented yet.
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("idctl bench: not implemented yet")
}
