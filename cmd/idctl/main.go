// Command idctl is the operator's CLI for idgen: get IDs, parse an ID, list
// worker assignments from ZooKeeper, manage businesses, migrate the MySQL
// schema, run a bounded load benchmark and read a node's audit file.
//
// Exit status: 0 on success and for --help/-h (help goes to stdout), 2 for a
// mistake in the command line (the error and a usage hint go to stderr), 1
// for any other failure. Every error is one line on stderr prefixed "idctl: ".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// version is stamped by build.sh: -ldflags "-X main.version=...".
var version = "dev"

const usage = `idctl operates an idgen cluster.

usage:
  idctl get     [--addr HOST:PORT] --biz NAME [--channel C] [--count N]
                [--sub-key K] [--request-id R] [--client-token-file F]
  idctl parse   [--json] [--addr HOST:PORT [--client-token-file F]] ID
  idctl decode  [--addr HOST:PORT] --biz NAME [--admin-token-file F] [--json] VALUE
  idctl workers --zk HOSTS [--cluster NAME] [--zk-root R] [--zk-auth-file F]
                [--idc N] [--json] [--watch]
  idctl cluster init|show|restore|migrate --zk HOSTS [--cluster NAME] ...
  idctl biz     create|update [--addr HOST:PORT] --biz NAME [--channel C] [--step N]
                [--id-quota N] [--id-burst N] ...
  idctl biz     get [--addr HOST:PORT] --biz NAME
  idctl biz     list [--addr HOST:PORT]
  idctl biz     token create|revoke|list [--addr HOST:PORT] --biz NAME ...
  idctl db      migrate|version|check|unbind --mysql-file F
  idctl audit   [--file F] [--biz NAME] [--since 10m|RFC3339] [--json]
  idctl bench   [--addr HOST:PORT] --biz NAME [--channel C] [--count N]
                [--concurrency N] [--duration D | --requests N] [--check] [--json]
  idctl health  [--admin-addr HOST:PORT] [--ready] [--channel C] [--timeout D]
  idctl version

--addr is a node's RPC address (env IDGEN_ADDR, default 127.0.0.1:8888);
health asks its admin HTTP address, --admin-addr (env IDGEN_ADMIN_ADDR,
default 127.0.0.1:8889). A channel is snowflake, unordered, ordered,
slow_ordered or a number 0-127 (a custom strategy's).

Each secret is taken as a file or as a value, under the node's own names:
--admin-token-file / --admin-token (env IDGEN_ADMIN_TOKEN_FILE,
IDGEN_ADMIN_TOKEN) for biz and decode; --client-token-file / --client-token
(env IDGEN_CLIENT_TOKEN_FILE, IDGEN_CLIENT_TOKEN) for get, bench and parse;
--zk-auth-file / --zk-auth (env IDGEN_ZK_AUTH_FILE, IDGEN_ZK_AUTH) for
workers, cluster and bench --zk; --mysql-file / --mysql (env
IDGEN_MYSQL_FILE, IDGEN_MYSQL) for db and cluster migrate. Both forms of
one secret are refused; a flag given leaves the environment unread. Without
an admin token, idctl reads $IDGEN_DATA_DIR/admin.token or ./data/admin.token,
which the node writes at its first start, so on the node's host nothing is
needed.

Run 'idctl COMMAND --help' for the flags of one command.
`

type command func(ctx context.Context, args []string, stdout, stderr io.Writer) error

var commands = map[string]command{
	"get":     cmdGet,
	"parse":   cmdParse,
	"decode":  cmdDecode,
	"workers": cmdWorkers,
	"biz":     cmdBiz,
	"db":      cmdDB,
	"bench":   cmdBench,
	"audit":   cmdAudit,
	"cluster": cmdCluster,
	"health":  cmdHealth,
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// realMain runs one command line, reports a failure on stderr and returns
// the exit status.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout, stderr)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "idctl:", err)
	var h *usageHint
	if errors.As(err, &h) {
		fmt.Fprint(stderr, h.text)
	}
	return exitCode(err)
}

// run dispatches a command line. A help request has printed its text on
// stdout and is not an error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageHint{usageError{errors.New("missing command")}, "\n" + usage}
	}
	name := args[0]
	switch {
	case isHelpArg(name) || name == "help":
		if name == "help" && len(args) > 1 {
			// idctl help COMMAND [SUB]: the same as idctl COMMAND [SUB] --help.
			return run(ctx, append(slices.Clone(args[1:]), "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	case name == "version" || name == "--version" || name == "-version":
		fmt.Fprintf(stdout, "idctl %s\n", version)
		return nil
	}
	cmd, ok := commands[name]
	if !ok {
		what := "command"
		if len(name) > 1 && name[0] == '-' {
			what = "flag"
		}
		return &usageHint{usageError{fmt.Errorf("unknown %s %q", what, name)}, "Run 'idctl --help' for the commands.\n"}
	}
	err := cmd(ctx, args[1:], stdout, stderr)
	var help *helpRequest
	if errors.As(err, &help) {
		help.print(stdout)
		return nil
	}
	var u usageError
	var h *usageHint
	if errors.As(err, &u) && !errors.As(err, &h) {
		err = &usageHint{err, fmt.Sprintf("Run 'idctl %s --help' for usage.\n", name)}
	}
	return err
}

// isHelpArg reports whether arg asks for help the way the flag package
// understands it.
func isHelpArg(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

// usageError marks a mistake in the command line (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// usageHint attaches what to print on stderr after the error line: the
// synopsis of the command that refused its command line, or where to find it.
type usageHint struct {
	err  error
	text string
}

func (e *usageHint) Error() string { return e.err.Error() }
func (e *usageHint) Unwrap() error { return e.err }

// helpRequest is returned by a command asked for --help; run prints the
// help on stdout and exits 0.
type helpRequest struct{ print func(w io.Writer) }

func (*helpRequest) Error() string { return "help requested" }
func (*helpRequest) Unwrap() error { return flag.ErrHelp }

func exitCode(err error) int {
	var u usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &u):
		return 2
	}
	return 1
}

// cmdFlags is the flag set of one command (or biz subcommand) with the
// text of its help.
type cmdFlags struct {
	*flag.FlagSet
	name     string   // "get", "biz create"
	synopsis string   // the usage line, without "usage: "
	about    string   // paragraphs printed between the synopsis and the flags
	args     []string // positional arguments, after parse
	// stderr takes the deprecation lines (an old spelling used).
	stderr io.Writer
	// renamed maps each deprecated spelling of a flag to its flag (see
	// deprecated), in the order they were added.
	renamed map[string]string
	oldOnes []string
}

// newCmdFlags returns the flag set of "idctl name". The flag package's own
// printing is off: parse reports through errors, and run prints; stderr
// takes the deprecation notes.
func newCmdFlags(name, synopsis, about string, stderr io.Writer) *cmdFlags {
	fs := flag.NewFlagSet("idctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &cmdFlags{FlagSet: fs, name: name, synopsis: synopsis, about: about, stderr: stderr, renamed: map[string]string{}}
	fs.Usage = func() {}
	return c
}

// deprecated registers old as another spelling of the flag named current
// (already defined), kept for one release: it sets the same value, --help
// names it only in one closing line, and parse prints one line on stderr
// naming the new spelling when it is used.
func (c *cmdFlags) deprecated(old, current string) {
	f := c.Lookup(current)
	if f == nil {
		panic("idctl: deprecated spelling of an undefined flag --" + current)
	}
	c.Var(f.Value, old, "deprecated: use --"+current)
	c.renamed[old] = current
	c.oldOnes = append(c.oldOnes, old)
}

// given reports whether the flag named name was given on the command line,
// in its own spelling or a deprecated one.
func (c *cmdFlags) given(name string) bool {
	found := false
	c.Visit(func(f *flag.Flag) { found = found || f.Name == name || c.renamed[f.Name] == name })
	return found
}

// printHelp writes the synopsis, the description and the flags; the
// deprecated spellings are named in one line after them.
func (c *cmdFlags) printHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", c.synopsis)
	if c.about != "" {
		fmt.Fprintf(w, "\n%s", c.about)
	}
	// A copy of the set without the deprecated spellings, printed as the
	// flag package prints (the defaults as registered, not as parsed so far).
	shown := flag.NewFlagSet(c.Name(), flag.ContinueOnError)
	n := 0
	c.VisitAll(func(f *flag.Flag) {
		if _, old := c.renamed[f.Name]; !old {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue
			n++
		}
	})
	if n > 0 {
		fmt.Fprint(w, "\nflags:\n")
		shown.SetOutput(w)
		shown.PrintDefaults()
	}
	if len(c.oldOnes) > 0 {
		var olds []string
		for _, old := range c.oldOnes {
			olds = append(olds, fmt.Sprintf("--%s (now --%s)", old, c.renamed[old]))
		}
		fmt.Fprintf(w, "\nOld spellings, accepted until the next release: %s.\n", strings.Join(olds, ", "))
	}
}

// noteDeprecated prints one line on stderr for each deprecated spelling
// the command line used.
func (c *cmdFlags) noteDeprecated() {
	for _, old := range c.oldOnes {
		c.Visit(func(f *flag.Flag) {
			if f.Name == old {
				deprecationNote(c.stderr, "--"+old, "--"+c.renamed[old])
			}
		})
	}
}

// deprecationNote is the one line on stderr that says an old spelling
// (a flag or an environment variable) was used and names the new one.
func deprecationNote(w io.Writer, old, current string) {
	if w != nil {
		fmt.Fprintf(w, "idctl: note: %s is deprecated and goes in the next release: use %s\n", old, current)
	}
}

// parse parses args, allowing flags after positional arguments (idctl
// parse ID --json); everything after "--" is positional. --help/-h yields
// a helpRequest, a bad flag a usage error with the synopsis.
func (c *cmdFlags) parse(args []string) error {
	c.args = nil
	for {
		if err := c.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return &helpRequest{c.printHelp}
			}
			return c.usageErr("%v", err)
		}
		rest := c.Args()
		if len(rest) == 0 {
			c.noteDeprecated()
			return nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			c.args = append(c.args, rest...)
			c.noteDeprecated()
			return nil
		}
		c.args = append(c.args, rest[0])
		args = rest[1:]
	}
}

// usageErr returns a usage error (exit 2) followed on stderr by the
// synopsis of the command.
func (c *cmdFlags) usageErr(format string, a ...any) error {
	return c.withUsage(usageError{fmt.Errorf(format, a...)})
}

// withUsage attaches the synopsis to a usage error (other errors pass).
func (c *cmdFlags) withUsage(err error) error {
	var u usageError
	if err == nil || !errors.As(err, &u) {
		return err
	}
	return &usageHint{err, fmt.Sprintf("usage: %s\nRun 'idctl %s --help' for the flags.\n", c.synopsis, c.name)}
}

// noArgs refuses positional arguments.
func (c *cmdFlags) noArgs() error {
	if len(c.args) > 0 {
		return c.usageErr("unexpected argument %q", c.args[0])
	}
	return nil
}
