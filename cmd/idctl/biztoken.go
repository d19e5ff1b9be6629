package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

const bizTokenUsage = `usage: idctl biz token SUBCOMMAND [--addr HOST:PORT] --biz NAME [flags]

A business's own client tokens: once it has one, NextIDs for it needs one of
them (the shared client token no longer does). The node keeps only a hash:
the secret is printed once, by create. Several may be valid at once, so a
token is rotated by creating the new one, moving the callers, then revoking
the old one.

subcommands:
  create --biz NAME [--label TEXT]   add a token; prints its secret once
  revoke --biz NAME --id ID          remove one (nodes stop accepting it within 2 s)
  list   --biz NAME                  list the tokens (id, label, created)

Every subcommand also takes --admin-token-file or --admin-token, --timeout
and --json.

` + adminTokenHelp

var bizTokenSynopsis = map[string]string{
	"create": "idctl biz token create [--addr HOST:PORT] --biz NAME [--label TEXT] [--json]",
	"revoke": "idctl biz token revoke [--addr HOST:PORT] --biz NAME --id ID [--json]",
	"list":   "idctl biz token list [--addr HOST:PORT] --biz NAME [--json]",
}

var bizTokenAbout = map[string]string{
	"create": "Adds a client token to a business and prints its secret: the only time it is\nshown, so keep it now. The business's callers send it as NextIDsRequest.token.\n\n" + adminTokenHelp,
	"revoke": "Revokes one client token of a business. With none left, the business is\nopen to the shared client token rule again.\n\n" + adminTokenHelp,
	"list":   "Lists a business's client tokens: id, label and creation time, never the secret.\n\n" + adminTokenHelp,
}

// cmdBizToken manages a business's client tokens (idctl biz token ...).
func cmdBizToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageHint{usageError{errors.New("biz token: missing subcommand: want create, revoke or list")}, "\n" + bizTokenUsage}
	}
	sub, args := args[0], args[1:]
	if isHelpArg(sub) || sub == "help" {
		return &helpRequest{func(w io.Writer) { fmt.Fprint(w, bizTokenUsage) }}
	}
	if _, ok := bizTokenSynopsis[sub]; !ok {
		return &usageHint{usageError{fmt.Errorf("biz token: unknown subcommand %q: want create, revoke or list", sub)}, "\n" + bizTokenUsage}
	}
	fs := newCmdFlags("biz token "+sub, bizTokenSynopsis[sub], bizTokenAbout[sub], stderr)
	addr := addAddrFlag(fs)
	tokens := addAdminTokenFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "RPC timeout")
	biz := fs.String("biz", "", "business name (required)")
	var label, id *string
	switch sub {
	case "create":
		label = fs.String("label", "", "who holds the token: free `text`, shown by list")
	case "revoke":
		id = fs.String("id", "", "`id` of the token to revoke, as list shows it (required)")
	}
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	if *biz == "" {
		return fs.usageErr("--biz is required")
	}
	if id != nil && *id == "" {
		return fs.usageErr("--id is required (idctl biz token list --biz %s shows the ids)", *biz)
	}
	if *timeout <= 0 {
		return fs.usageErr("--timeout %v: want a positive duration", *timeout)
	}
	token, err := tokens.resolve()
	if err != nil {
		return err
	}
	c, err := newClient(ctx, *addr, *timeout)
	if err != nil {
		return fs.withUsage(err)
	}
	printJSON := func(v any) error {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	switch sub {
	case "create":
		resp, err := c.CreateBizToken(ctx, &idl.CreateBizTokenRequest{Biz: *biz, Label: optional(*label), Token: &token})
		if err != nil {
			return describe(err)
		}
		if *asJSON {
			return printJSON(resp)
		}
		fmt.Fprintf(stdout, "id:     %s\nlabel:  %s\nsecret: %s\n\n", resp.Info.Id, resp.Info.Label, resp.Secret)
		fmt.Fprintf(stdout, "Keep the secret now: it is not shown again (the node keeps only a hash).\n"+
			"Callers send it as NextIDsRequest.token; revoke it with: idctl biz token revoke --biz %s --id %s\n", *biz, resp.Info.Id)
		return nil
	case "revoke":
		resp, err := c.RevokeBizToken(ctx, &idl.RevokeBizTokenRequest{Biz: *biz, Id: *id, Token: &token})
		if err != nil {
			return describe(err)
		}
		if *asJSON {
			return printJSON(resp)
		}
		fmt.Fprintf(stdout, "revoked token %s of %s; %d left", *id, *biz, resp.Remaining)
		if resp.Remaining == 0 {
			fmt.Fprint(stdout, " (the business is open to the shared client token rule again)")
		}
		fmt.Fprintln(stdout)
		return nil
	}
	b, err := c.GetBiz(ctx, &idl.GetBizRequest{Name: *biz, Token: &token})
	if err != nil {
		return describe(err)
	}
	if *asJSON {
		if b.Tokens == nil {
			b.Tokens = []*idl.BizToken{}
		}
		return printJSON(b.Tokens)
	}
	if len(b.Tokens) == 0 {
		fmt.Fprintf(stdout, "%s has no client token of its own (the shared client token rule applies)\n", *biz)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLABEL\tCREATED")
	for _, t := range b.Tokens {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Id, t.Label, time.UnixMilli(t.CreatedAtMs).UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}
