package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// cmdDecode asks a node (admin) for the number behind a business's output.
func cmdDecode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCmdFlags("decode", "idctl decode [--addr HOST:PORT] --biz NAME [--admin-token-file F] [--json] VALUE",
		"Prints the number behind an obfuscated ID or a code of a business (the admin Decode RPC: the\n"+
			"key stays on the server) and, when that number is a snowflake ID of the cluster, its parse.\n\n"+adminTokenHelp, stderr)
	addr := addAddrFlag(fs)
	tokens := addAdminTokenFlags(fs)
	biz := fs.String("biz", "", "business name (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "RPC timeout")
	if err := fs.parse(args); err != nil {
		return err
	}
	if *biz == "" {
		return fs.usageErr("--biz is required")
	}
	if len(fs.args) != 1 {
		return fs.usageErr("want exactly one VALUE (an ID or a code)")
	}
	token, err := tokens.resolve()
	if err != nil {
		return err
	}
	c, err := newClient(ctx, *addr, *timeout)
	if err != nil {
		return fs.withUsage(err)
	}
	resp, err := c.Decode(ctx, &idl.DecodeRequest{Biz: *biz, Value: fs.args[0], Token: &token})
	if err != nil {
		return describe(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(resp)
	}
	fmt.Fprintf(stdout, "number:     %d\nformat:     %s\nobfuscated: %v\n", resp.Number, resp.Format, resp.Obfuscated)
	if p := resp.Snowflake; p != nil {
		fmt.Fprintf(stdout, "snowflake:  time %s idc %d node %d worker %d sequence %d\n", p.Time, p.Idc, p.Node, p.Worker, p.Sequence)
	}
	return nil
}
