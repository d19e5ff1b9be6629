// Command idctl is the operator's CLI for idgen: get IDs, parse an ID, list
// worker assignments from ZooKeeper, manage businesses, migrate the MySQL
// schema and run a bounded load benchmark.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `idctl: operate an idgen cluster

usage:
  idctl get     --addr HOST:PORT --biz NAME [--channel snowflake|unordered|ordered]
                [--count N] [--sub-key K] [--request-id R]
  idctl parse   [--json] ID
  idctl workers --zk HOSTS [--cluster NAME] [--idc N] [--json] [--watch]
  idctl biz     create|update|get|list --addr HOST:PORT [--biz NAME] ...
  idctl db      migrate --mysql DSN
  idctl bench   --addr HOST:PORT --biz NAME [--channel C] [--count N]
                [--concurrency N] [--duration D | --requests N] [--check] [--json]

Run 'idctl COMMAND --help' for the flags of one command.
`

type command func(ctx context.Context, args []string, stdout, stderr io.Writer) error

var commands = map[string]command{
	"get":     cmdGet,
	"parse":   cmdParse,
	"workers": cmdWorkers,
	"biz":     cmdBiz,
	"db":      cmdDB,
	"bench":   cmdBench,
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "idctl:", err)
		}
		os.Exit(exitCode(err))
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Errorf("unknown command %q", args[0])}
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

// usageError marks a mistake in the command line (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

// newFlagSet returns a flag set for one subcommand that reports errors
// instead of exiting, writing help to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("idctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args into fs, turning parse errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return nil
}
