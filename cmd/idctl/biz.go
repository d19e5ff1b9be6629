package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/segment"
)

const bizUsage = `usage: idctl biz SUBCOMMAND --addr HOST:PORT [flags]

subcommands:
  create --biz NAME [--channel C] [--step N] [--start N] [--low-water PCT]
         [--fallback] [--rate-limit N] [--description TEXT]
  update --biz NAME [--channel C] [--step N] [--low-water PCT]
         [--fallback | --no-fallback] [--rate-limit N] [--description TEXT]
  get    --biz NAME
  list

Every subcommand also takes --token (env IDGEN_ADMIN_TOKEN), --timeout and
--json. Run 'idctl biz SUBCOMMAND --help' for the flags of one.
`

// bizSynopsis is the usage line of each biz subcommand.
var bizSynopsis = map[string]string{
	"create": "idctl biz create --addr HOST:PORT --biz NAME [--channel C] [--step N] [--start N] [--low-water PCT] [--fallback] [--rate-limit N] [--description TEXT]",
	"update": "idctl biz update --addr HOST:PORT --biz NAME [--channel C] [--step N] [--low-water PCT] [--fallback | --no-fallback] [--rate-limit N] [--description TEXT]",
	"get":    "idctl biz get --addr HOST:PORT --biz NAME [--json]",
	"list":   "idctl biz list --addr HOST:PORT [--json]",
}

var bizAbout = map[string]string{
	"create": "Creates a business. A setting not given takes the server's default, shown as\n\"not given\" below.\n",
	"update": "Changes the settings given; the others stay as they are.\n",
	"get":    "Prints one business.\n",
	"list":   "Prints every business.\n",
}

// cmdBiz manages businesses through a node's admin RPCs.
func cmdBiz(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageHint{usageError{errors.New("biz: missing subcommand: want create, update, get or list")}, "\n" + bizUsage}
	}
	sub, args := args[0], args[1:]
	if isHelpArg(sub) || sub == "help" {
		return &helpRequest{func(w io.Writer) { fmt.Fprint(w, bizUsage) }}
	}
	if _, ok := bizSynopsis[sub]; !ok {
		return &usageHint{usageError{fmt.Errorf("biz: unknown subcommand %q: want create, update, get or list", sub)}, "\n" + bizUsage}
	}
	fs := newCmdFlags("biz "+sub, bizSynopsis[sub], bizAbout[sub])
	addr := fs.String("addr", envOr("IDGEN_ADDR", "127.0.0.1:8888"), "idgen RPC address (env IDGEN_ADDR)")
	token := fs.String("token", envOr("IDGEN_ADMIN_TOKEN", ""), "admin token (env IDGEN_ADMIN_TOKEN)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "RPC timeout")
	var biz *string
	if sub != "list" {
		biz = fs.String("biz", "", "business name (required)")
	}
	var (
		channel, desc        *string
		step, start          *int64
		lowWater, rateLim    *int
		fallback, noFallback *bool
		obf                  *bool
		format, plugins      *string
		codeMin              *int
	)
	if sub == "create" || sub == "update" {
		// On create "not given" means the server's default, on update
		// "unchanged": only the flags given are sent.
		unset := "not given: unchanged"
		if sub == "create" {
			unset = "not given: snowflake"
		}
		channel = fs.String("channel", "", "default `channel`: snowflake, unordered or ordered ("+unset+")")
		if sub == "create" {
			unset = fmt.Sprintf("not given: %d", segment.DefaultStep)
		}
		step = fs.Int64("step", 0, "UNORDERED starting segment step, `N` numbers per refill ("+unset+")")
		if sub == "create" {
			unset = fmt.Sprintf("not given: %d", segment.DefaultLowWaterPct)
		}
		lowWater = fs.Int("low-water", 0, fmt.Sprintf("refill at this `percent` of the segment left, 1-%d (%s)", segment.MaxLowWaterPct, unset))
		if sub == "create" {
			unset = "not given: off"
		}
		fallback = fs.Bool("fallback", false, "let SNOWFLAKE fall back to the business's segment ("+unset+")")
		if sub == "update" {
			noFallback = fs.Bool("no-fallback", false, "turn the SNOWFLAKE fallback off (the same as --fallback=false)")
		}
		if sub == "create" {
			unset = "not given: unlimited"
		}
		rateLim = fs.Int("rate-limit", 0, "allow `N` requests per second per node; 0 = unlimited ("+unset+")")
		desc = fs.String("description", "", "free `text`")
		obf = fs.Bool("obfuscate", false, "hand out numbers through the business's keyed bijection (only while it has issued nothing)")
		format = fs.String("format", "", "`int` or code (Crockford base32); only while the business has issued nothing")
		codeMin = fs.Int("code-min-length", 0, fmt.Sprintf("shortest code, 0-%d", segment.MaxCodeMinLength))
		plugins = fs.String("plugins", "", "comma-separated plugin `names` run for the business (empty: none)")
		if sub == "create" {
			start = fs.Int64("start", 0, fmt.Sprintf("first UNORDERED/ORDERED `number` (not given: %d)", segment.DefaultStartNum))
		}
	}
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if biz != nil && *biz == "" {
		return fs.usageErr("--biz is required")
	}
	if *timeout <= 0 {
		return fs.usageErr("--timeout %v: want a positive duration", *timeout)
	}
	var tok *string
	if *token != "" {
		tok = token
	}
	var (
		create *idl.CreateBizRequest
		update *idl.UpdateBizRequest
	)
	if sub == "create" || sub == "update" {
		var ch *idl.Channel
		if set["channel"] {
			v, err := parseChannel(*channel)
			if err != nil {
				return fs.withUsage(err)
			}
			ch = &v
		}
		var fb *bool
		if set["fallback"] && set["no-fallback"] {
			return fs.usageErr("--fallback and --no-fallback are exclusive")
		}
		if set["fallback"] {
			fb = fallback
		} else if set["no-fallback"] {
			v := !*noFallback
			fb = &v
		}
		opt64 := func(name string, v *int64) *int64 {
			if set[name] {
				return v
			}
			return nil
		}
		var err error
		opt32 := func(name string, v *int) *int32 {
			if !set[name] {
				return nil
			}
			if *v < math.MinInt32 || *v > math.MaxInt32 {
				err = fs.usageErr("--%s %d: out of range", name, *v)
				return nil
			}
			x := int32(*v)
			return &x
		}
		if set["rate-limit"] && *rateLim < 0 {
			return fs.usageErr("--rate-limit %d: want 0 (unlimited) or a positive number of requests per second", *rateLim)
		}
		var d *string
		if set["description"] {
			d = desc
		}
		var (
			ob *bool
			fm *string
			pl []string
		)
		if set["obfuscate"] {
			ob = obf
		}
		if set["format"] {
			if _, ferr := segment.ParseFormat(*format); ferr != nil {
				return fs.usageErr("--format %q: want int or code", *format)
			}
			fm = format
		}
		if set["plugins"] {
			pl = []string{}
			for _, p := range strings.Split(*plugins, ",") {
				if p = strings.TrimSpace(p); p != "" {
					pl = append(pl, p)
				}
			}
		}
		if sub == "create" {
			create = &idl.CreateBizRequest{Name: *biz, Channel: ch, Step: opt64("step", step),
				LowWaterPct: opt32("low-water", lowWater), StartNum: opt64("start", start), Fallback: fb,
				RateLimit: opt32("rate-limit", rateLim), Description: d, Token: tok,
				Obfuscate: ob, Format: fm, CodeMinLength: opt32("code-min-length", codeMin), Plugins: pl}
		} else {
			update = &idl.UpdateBizRequest{Name: *biz, Channel: ch, Step: opt64("step", step),
				LowWaterPct: opt32("low-water", lowWater), Fallback: fb, RateLimit: opt32("rate-limit", rateLim),
				Description: d, Token: tok,
				Obfuscate: ob, Format: fm, CodeMinLength: opt32("code-min-length", codeMin), Plugins: pl}
		}
		if err != nil {
			return err
		}
	}
	c, err := newClient(*addr, *timeout)
	if err != nil {
		return fs.withUsage(err)
	}
	var out []*idl.Biz
	switch sub {
	case "create", "update":
		var b *idl.Biz
		if create != nil {
			b, err = c.CreateBiz(ctx, create)
		} else {
			b, err = c.UpdateBiz(ctx, update)
		}
		if err != nil {
			return describe(err)
		}
		out = []*idl.Biz{b}
	case "get":
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
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCHANNEL\tSTEP\tLOW-WATER\tSTART\tFALLBACK\tRATE-LIMIT\tOUTPUT\tPLUGINS\tUPDATED\tDESCRIPTION")
	for _, b := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d%%\t%d\t%v\t%d\t%s\t%s\t%s\t%s\n", b.Name, b.Channel, b.Step, b.LowWaterPct, b.StartNum,
			b.Fallback, b.RateLimit, outputLabel(b), strings.Join(b.Plugins, ","),
			time.UnixMilli(b.UpdatedAtMs).UTC().Format(time.RFC3339), b.Description)
	}
	return tw.Flush()
}

// outputLabel describes a business's output: int, int+obfuscated, code(6),
// code(6)+obfuscated.
func outputLabel(b *idl.Biz) string {
	out := b.GetFormat()
	if out == "" {
		out = "int"
	}
	if out == "code" {
		out = fmt.Sprintf("code(%d)", b.GetCodeMinLength())
	}
	if b.GetObfuscate() {
		out += "+obfuscated"
	}
	return out
}
