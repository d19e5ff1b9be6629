package main

import (
	"context"
	"errors"
	"io"
)

// cmdBiz is not implemented yet.
func cmdBiz(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("idctl biz: not implemented yet")
}
