package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// cmdBiz manages businesses through a node's admin RPCs.
func cmdBiz(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{fmt.Errorf("want a subcommand: idctl biz create|update|get|list")}
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("biz "+sub, stderr)
	addr := fs.String("addr", envOr("IDGEN_ADDR", "127.0.0.1:8888"), "idgen RPC address (env IDGEN_ADDR)")
	token := fs.String("token", envOr("IDGEN_ADMIN_TOKEN", ""), "admin token (env IDGEN_ADMIN_TOKEN)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "RPC timeout")
	biz := fs.String("biz", "", "business name")
	var (
		channel, desc      *string
		step, start        *int64
		lowWater, rateLim  *int
		fallback, noFallbk *bool
	)
	if sub == "create" || sub == "update" {
		channel = fs.String("channel", "", "default channel: snowflake, unordered or ordered")
		step = fs.Int64("step", 0, "UNORDERED starting segment step")
		lowWater = fs.Int("low-water", 0, "refill at this % of the segment left (1-90)")
		fallback = fs.Bool("fallback", false, "let SNOWFLAKE fall back to the business's segment")
		noFallbk = fs.Bool("no-fallback", false, "turn the SNOWFLAKE fallback off")
		rateLim = fs.Int("rate-limit", -1, "requests per second per node, 0 = unlimited")
		desc = fs.String("description", "", "free text")
		if sub == "create" {
			start = fs.Int64("start", 0, "first UNORDERED/ORDERED number (default 1)")
		}
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var tok *string
	if *token != "" {
		tok = token
	}
	c, err := newClient(*addr, *timeout)
	if err != nil {
		return err
	}
	var out []*idl.Biz
	switch sub {
	case "create", "update":
		if *biz == "" {
			return usageError{fmt.Errorf("--biz is required")}
		}
		var ch *idl.Channel
		if set["channel"] {
			v, err := parseChannel(*channel)
			if err != nil {
				return err
			}
			ch = &v
		}
		var fb *bool
		if set["fallback"] || set["no-fallback"] {
			v := *fallback && !*noFallbk
			fb = &v
		}
		opt64 := func(name string, v *int64) *int64 {
			if set[name] {
				return v
			}
			return nil
		}
		opt32 := func(name string, v *int) *int32 {
			if set[name] {
				x := int32(*v)
				return &x
			}
			return nil
		}
		var d *string
		if set["description"] {
			d = desc
		}
		var b *idl.Biz
		if sub == "create" {
			b, err = c.CreateBiz(ctx, &idl.CreateBizRequest{Name: *biz, Channel: ch, Step: opt64("step", step),
				LowWaterPct: opt32("low-water", lowWater), StartNum: opt64("start", start), Fallback: fb,
				RateLimit: opt32("rate-limit", rateLim), Description: d, Token: tok})
		} else {
			b, err = c.UpdateBiz(ctx, &idl.UpdateBizRequest{Name: *biz, Channel: ch, Step: opt64("step", step),
				LowWaterPct: opt32("low-water", lowWater), Fallback: fb, RateLimit: opt32("rate-limit", rateLim),
				Description: d, Token: tok})
		}
		if err != nil {
			return describe(err)
		}
		out = []*idl.Biz{b}
	case "get":
		if *biz == "" {
			return usageError{fmt.Errorf("--biz is required")}
		}
		b, err := c.GetBiz(ctx, &idl.GetBizRequest{Name: *biz, Token: tok})
		if err != nil {
			return describe(err)
		}
		out = []*idl.Biz{b}
	case "list":
		resp, err := c.ListBiz(ctx, &idl.ListBizRequest{Token: tok})
		if err != nil {
			return describe(err)
		}
		out = resp.Bizs
	default:
		return usageError{fmt.Errorf("unknown biz subcommand %q: want create, update, get or list", sub)}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCHANNEL\tSTEP\tLOW-WATER\tSTART\tFALLBACK\tRATE-LIMIT\tUPDATED\tDESCRIPTION")
	for _, b := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d%%\t%d\t%v\t%d\t%s\t%s\n", b.Name, b.Channel, b.Step, b.LowWaterPct, b.StartNum,
			b.Fallback, b.RateLimit, time.UnixMilli(b.UpdatedAtMs).UTC().Format(time.RFC3339), b.Description)
	}
	return tw.Flush()
}
