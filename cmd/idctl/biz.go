package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/segment"
)

const bizUsage = `usage: idctl biz SUBCOMMAND [--addr HOST:PORT] [flags]

subcommands:
  create --biz NAME [--channel C] [--channels C,...] [--step N] [--start N] [--low-water PCT]
         [--fallback] [--rate-limit N] [--id-quota N] [--id-burst N]
         [--ordered-mode gapless|cached] [--description TEXT]
  update --biz NAME [--channel C] [--channels C,...] [--step N] [--low-water PCT]
         [--fallback | --no-fallback] [--rate-limit N] [--id-quota N]
         [--id-burst N] [--ordered-mode gapless|cached] [--description TEXT]
  get    --biz NAME
  list
  token  create --biz NAME [--label TEXT]   add a client token (printed once)
  token  revoke --biz NAME --id ID          remove one
  token  list --biz NAME                    list them (never the secrets)

Every subcommand also takes --admin-token-file or --admin-token, --timeout
and --json.
Run 'idctl biz SUBCOMMAND --help' for the flags of one.

` + adminTokenHelp

// bizSynopsis is the usage line of each biz subcommand.
var bizSynopsis = map[string]string{
	"create": "idctl biz create [--addr HOST:PORT] --biz NAME [--channel C] [--channels C,...] [--step N] [--start N] [--low-water PCT] [--fallback] [--rate-limit N] [--id-quota N] [--id-burst N] [--ordered-mode gapless|cached] [--description TEXT]",
	"update": "idctl biz update [--addr HOST:PORT] --biz NAME [--channel C] [--channels C,...] [--step N] [--low-water PCT] [--fallback | --no-fallback] [--rate-limit N] [--id-quota N] [--id-burst N] [--ordered-mode gapless|cached] [--description TEXT]",
	"get":    "idctl biz get [--addr HOST:PORT] --biz NAME [--json]",
	"list":   "idctl biz list [--addr HOST:PORT] [--json]",
}

var bizAbout = map[string]string{
	"create": "Creates a business. A setting not given takes the server's default, shown as\n\"not given\" below.\n\n" + adminTokenHelp,
	"update": "Changes the settings given; the others stay as they are.\n\n" + adminTokenHelp,
	"get":    "Prints one business.\n\n" + adminTokenHelp,
	"list":   "Prints every business (asking the node page by page).\n\n" + adminTokenHelp,
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
	if sub == "token" {
		return cmdBizToken(ctx, args, stdout, stderr)
	}
	if _, ok := bizSynopsis[sub]; !ok {
		return &usageHint{usageError{fmt.Errorf("biz: unknown subcommand %q: want create, update, get, list or token", sub)}, "\n" + bizUsage}
	}
	fs := newCmdFlags("biz "+sub, bizSynopsis[sub], bizAbout[sub], stderr)
	addr := addAddrFlag(fs)
	tokens := addAdminTokenFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "RPC timeout")
	var biz *string
	if sub != "list" {
		biz = fs.String("biz", "", "business name (required)")
	}
	var (
		channel, desc        *string
		channels             *string
		step, start          *int64
		lowWater, rateLim    *int
		idQuota, idBurst     *int64
		fallback, noFallback *bool
		obf                  *bool
		format, plugins      *string
		orderedMode          *string
		codeMin              *int
	)
	if sub == "create" || sub == "update" {
		// On create "not given" means the server's default, on update
		// "unchanged": only the flags given are sent.
		unset := "not given: unchanged"
		if sub == "create" {
			unset = "not given: snowflake"
		}
		channel = fs.String("channel", "", "default "+channelHelp+" ("+unset+")")
		if sub == "create" {
			unset = "not given: --channel alone; with --channel not given, the first listed is the default"
		}
		channels = fs.String("channels", "", "the `channels` the business serves, comma-separated names or numbers (custom strategies); the default channel is always one; "+
			"requests on others are refused. An obfuscated or code business serves one channel, or unordered,snowflake ("+unset+")")
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
		idQuota = fs.Int64("id-quota", 0, "allow `N` IDs per second per node; 0 = unlimited ("+unset+"); over it callers get RATE_LIMITED with retry_after_ms")
		if sub == "create" {
			unset = "not given: the server's default"
		}
		idBurst = fs.Int64("id-burst", 0, "IDs the quota lets through at once, `N` ("+unset+")")
		if sub == "create" {
			unset = "not given: gapless"
		}
		orderedMode = fs.String("ordered-mode", "", "how the shard's owner persists ORDERED numbers, `mode` gapless (each answer durable before it is sent) "+
			"or cached (reserved ahead, answered from memory: a crash of the owner leaves a gap); it may change at any time ("+unset+")")
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
		var chs []idl.Channel
		if set["channels"] {
			list, cerr := segment.ParseChannels(*channels)
			if cerr != nil || len(list) == 0 {
				return fs.usageErr("--channels %q: want a comma-separated list of unordered, ordered, snowflake, slow_ordered or channel numbers 0-127", *channels)
			}
			for _, c := range list {
				chs = append(chs, idl.Channel(c))
			}
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
		if set["id-quota"] && *idQuota < 0 {
			return fs.usageErr("--id-quota %d: want 0 (unlimited) or a positive number of IDs per second", *idQuota)
		}
		if set["id-burst"] && *idBurst < 0 {
			return fs.usageErr("--id-burst %d: want a positive number of IDs", *idBurst)
		}
		var d *string
		if set["description"] {
			d = desc
		}
		var om *string
		if set["ordered-mode"] {
			// Exactly a name: the empty string would mean "unchanged" to
			// UpdateBiz, which is not what --ordered-mode "" says.
			if *orderedMode != segment.OrderedGapless.String() && *orderedMode != segment.OrderedCached.String() {
				return fs.usageErr("--ordered-mode %q: want gapless or cached", *orderedMode)
			}
			om = orderedMode
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
			create = &idl.CreateBizRequest{Name: *biz, Channel: ch, Channels: chs, Step: opt64("step", step),
				LowWaterPct: opt32("low-water", lowWater), StartNum: opt64("start", start), Fallback: fb,
				RateLimit: opt32("rate-limit", rateLim), Description: d,
				Obfuscate: ob, Format: fm, CodeMinLength: opt32("code-min-length", codeMin), Plugins: pl,
				IdQuota: opt64("id-quota", idQuota), IdBurst: opt64("id-burst", idBurst), OrderedMode: om}
		} else {
			update = &idl.UpdateBizRequest{Name: *biz, Channel: ch, Channels: chs, Step: opt64("step", step),
				LowWaterPct: opt32("low-water", lowWater), Fallback: fb, RateLimit: opt32("rate-limit", rateLim),
				Description: d, Obfuscate: ob, Format: fm, CodeMinLength: opt32("code-min-length", codeMin), Plugins: pl,
				IdQuota: opt64("id-quota", idQuota), IdBurst: opt64("id-burst", idBurst), OrderedMode: om}
		}
		if err != nil {
			return err
		}
	}
	token, err := tokens.resolve()
	if err != nil {
		return err
	}
	tok := &token
	if create != nil {
		create.Token = tok
	}
	if update != nil {
		update.Token = tok
	}
	c, err := newClient(ctx, *addr, *timeout)
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
		if out, err = listAllBiz(ctx, c, tok); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if sub == "list" {
			return enc.Encode(out)
		}
		return enc.Encode(out[0]) // one business asked for, one object
	}
	return printBizTable(stdout, out)
}

// printBizTable prints businesses as a table. The ORDERED-MODE column is
// there only when one of them serves ORDERED, and says "-" for the others:
// the setting means nothing to a business that does not.
func printBizTable(w io.Writer, bs []*idl.Biz) error {
	ordered := slices.ContainsFunc(bs, servesOrdered)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cols := []string{"NAME", "CHANNEL", "CHANNELS", "ORDERED-MODE", "STEP", "LOW-WATER", "START", "FALLBACK", "RATE-LIMIT", "ID-QUOTA", "TOKENS", "OUTPUT", "PLUGINS", "UPDATED", "DESCRIPTION"}
	row := func(vals []string) {
		if !ordered {
			vals = slices.Delete(slices.Clone(vals), 3, 4)
		}
		fmt.Fprintln(tw, strings.Join(vals, "\t"))
	}
	row(cols)
	for _, b := range bs {
		mode := "-"
		if servesOrdered(b) {
			mode = orderedModeLabel(b)
		}
		row([]string{b.Name, b.Channel.String(), channelsLabel(b), mode, fmt.Sprint(b.Step), fmt.Sprintf("%d%%", b.LowWaterPct), fmt.Sprint(b.StartNum),
			fmt.Sprint(b.Fallback), fmt.Sprint(b.RateLimit), quotaLabel(b), fmt.Sprint(len(b.Tokens)), outputLabel(b), strings.Join(b.Plugins, ","),
			time.UnixMilli(b.UpdatedAtMs).UTC().Format(time.RFC3339), b.Description})
	}
	return tw.Flush()
}

// servesOrdered reports whether b serves the ORDERED channel (its default
// or one of its channels; SLOW_ORDERED is served as ORDERED).
func servesOrdered(b *idl.Biz) bool {
	isOrdered := func(c idl.Channel) bool {
		return segment.CanonicalChannel(segment.Channel(c)) == segment.ChannelOrdered
	}
	return isOrdered(b.Channel) || slices.ContainsFunc(b.Channels, isOrdered)
}

// listAllBiz asks for every page of ListBiz: one answer for thousands of
// businesses would pass the node's frame limit.
func listAllBiz(ctx context.Context, c idgensvc.Client, tok *string) ([]*idl.Biz, error) {
	var (
		out   []*idl.Biz
		after string
	)
	for {
		req := &idl.ListBizRequest{Token: tok}
		if after != "" {
			req.After = &after
		}
		resp, err := c.ListBiz(ctx, req)
		if err != nil {
			return nil, describe(err)
		}
		out = append(out, resp.Bizs...)
		next := resp.GetNext()
		if next == "" {
			return out, nil
		}
		if next <= after {
			// Pages come in name order: a cursor that does not move on
			// would loop forever.
			return nil, fmt.Errorf("the node answered ListBiz after %q with next %q, which does not move on: upgrade the node, or report this", after, next)
		}
		after = next
	}
}

// quotaLabel describes a business's ID quota: "unlimited", or "N/s" and
// its burst when set.
func quotaLabel(b *idl.Biz) string {
	if b.GetIdQuota() <= 0 {
		return "unlimited"
	}
	if b.GetIdBurst() > 0 {
		return fmt.Sprintf("%d/s burst %d", b.GetIdQuota(), b.GetIdBurst())
	}
	return fmt.Sprintf("%d/s", b.GetIdQuota())
}

// channelsLabel lists the channels a business serves (built-ins by name,
// custom strategies by number); "-" from a node that predates channel
// lists (it serves whatever a request names).
func channelsLabel(b *idl.Biz) string {
	if len(b.Channels) == 0 {
		return "-"
	}
	chs := make([]segment.Channel, len(b.Channels))
	for i, c := range b.Channels {
		chs[i] = segment.Channel(c)
	}
	return strings.ToUpper(segment.ChannelNames(chs))
}

// orderedModeLabel is the business's ordered_mode: gapless when the node
// does not say (nodes from before the setting persist every answer).
func orderedModeLabel(b *idl.Biz) string {
	if m := b.GetOrderedMode(); m != "" {
		return m
	}
	return segment.OrderedGapless.String()
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
