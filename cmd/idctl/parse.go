package main

import (
	"context"
	"errors"
	"io"
)

// cmdParse is not implemented yet.
func cmdParse(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("idctl parse: not implemented yet")
}
