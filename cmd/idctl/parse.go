package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/idgen/idgen/internal/idctlenv"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/snowflake"
)

const parseAbout = `Decodes a snowflake ID into its time, IDC, node, worker and sequence:
locally with the layout flags, or with --addr by the ParseID RPC of a node,
which uses its cluster's layout. A node with a client token needs it on
ParseID: --client-token-file, --client-token, IDGEN_CLIENT_TOKEN(_FILE), or
else the admin token when idctl finds one (see 'idctl biz --help').

Segment (UNORDERED, ORDERED and fallback) numbers are not snowflake IDs and
decode to nonsense. They stay below the cluster's snowflake floor,
(cluster creation ms - epoch ms) << 22. A node knows that floor; locally
idctl cannot, and flags an ID whose timestamp is less than 24 hours after the
epoch: no cluster issues such an ID unless it was created on the day of its
epoch. Such an ID gets a warning on stderr and "below_floor": true with
--json, and the decoded fields are printed anyway.
`

// localFloorAfterEpoch is how long after the epoch a local decode expects
// a cluster to have been created at the earliest (see parseAbout).
const localFloorAfterEpoch = 24 * time.Hour

// parsed is one decoded ID; its JSON form is what --json prints.
type parsed struct {
	ID          int64  `json:"id"`
	Time        string `json:"time"`
	TimestampMs int64  `json:"timestamp_ms"`
	IDC         int    `json:"idc"`
	Node        int    `json:"node"`
	Worker      int    `json:"worker"`
	Sequence    int    `json:"sequence"`
	BelowFloor  bool   `json:"below_floor"`
	Warning     string `json:"warning,omitempty"`
}

// cmdParse decodes a snowflake ID, locally (no server needed) or by a node.
func cmdParse(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCmdFlags("parse", "idctl parse [--json] [--addr HOST:PORT [--client-token-file F] | --epoch T --idc-bits N --node-bits N] ID", parseAbout, stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	addr := fs.String("addr", "", "decode by the ParseID RPC of this node instead of locally")
	timeout := fs.Duration("timeout", 3*time.Second, "RPC timeout (with --addr)")
	clientTok := addClientTokenFlags(fs, "; neither given: the admin token if idctl finds one, which nodes accept on ParseID too")
	epoch := fs.String("epoch", envOr(idctlenv.Epoch, snowflake.DefaultEpoch.Format(time.RFC3339)), "cluster epoch, RFC 3339 (env IDGEN_EPOCH)")
	idcBits := fs.Int("idc-bits", snowflake.DefaultIDCBits, "IDC bits of the cluster")
	nodeBits := fs.Int("node-bits", snowflake.DefaultNodeBits, "node bits of the cluster")
	if err := fs.parse(args); err != nil {
		return err
	}
	if len(fs.args) != 1 {
		return fs.usageErr("want exactly one ID, e.g. idctl parse 7384729384729384")
	}
	id, err := strconv.ParseInt(fs.args[0], 10, 64)
	if err != nil {
		return fs.usageErr("%q is not a 64-bit integer", fs.args[0])
	}
	if id <= 0 {
		return fs.usageErr("ID %d: snowflake IDs are positive", id)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var p parsed
	if *addr != "" {
		for _, name := range []string{"epoch", "idc-bits", "node-bits"} {
			if set[name] {
				return fs.usageErr("--%s and --addr are exclusive: the node decodes with its cluster's layout", name)
			}
		}
		if *timeout <= 0 {
			return fs.usageErr("--timeout %v: want a positive duration", *timeout)
		}
		tok, err := clientTok.orAdmin()
		if err != nil {
			return err
		}
		if p, err = parseRemote(ctx, *addr, *timeout, tok, id); err != nil {
			return err
		}
	} else {
		ep, err := time.Parse(time.RFC3339, *epoch)
		if err != nil {
			return fs.usageErr("--epoch %q: want RFC 3339, e.g. 2020-01-01T00:00:00Z", *epoch)
		}
		l := snowflake.Layout{Epoch: ep.UTC(), IDCBits: *idcBits, NodeBits: *nodeBits}.Normalize()
		if err := l.Validate(); err != nil {
			return fs.usageErr("%v", err)
		}
		if p, err = parseLocal(l, id); err != nil {
			return err
		}
	}
	if p.BelowFloor {
		fmt.Fprintf(stderr, "idctl: warning: %s\n", p.Warning)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(p)
	}
	_, err = fmt.Fprintf(stdout, "id:        %d\ntime:      %s\ntimestamp: %d ms\nidc:       %d\nnode:      %d\nworker:    %d\nsequence:  %d\n",
		p.ID, p.Time, p.TimestampMs, p.IDC, p.Node, p.Worker, p.Sequence)
	return err
}

// parseLocal decodes id with layout l and flags it below the local floor.
func parseLocal(l snowflake.Layout, id int64) (parsed, error) {
	parts, err := l.Parse(id)
	if err != nil {
		return parsed{}, err
	}
	p := parsed{ID: parts.ID, Time: parts.Time.Format("2006-01-02T15:04:05.000Z07:00"), TimestampMs: parts.UnixMs,
		IDC: parts.IDC, Node: parts.Node, Worker: parts.Worker, Sequence: parts.Sequence}
	if floor := l.Floor(l.EpochMs() + localFloorAfterEpoch.Milliseconds()); id < floor {
		p.BelowFloor = true
		p.Warning = fmt.Sprintf("ID %d is below %d, the snowflake floor of a cluster created a day after its epoch %s: "+
			"probably a segment number, not a snowflake ID, and its decoded fields mean nothing (--addr asks a node, which knows its cluster's floor)",
			id, floor, l.Epoch.Format(time.RFC3339))
	}
	return p, nil
}

// parseRemote asks a node to decode id.
func parseRemote(ctx context.Context, addr string, timeout time.Duration, token string, id int64) (parsed, error) {
	c, err := newClient(ctx, addr, timeout)
	if err != nil {
		return parsed{}, err
	}
	r, err := c.ParseID(ctx, &idl.ParseIDRequest{Id: id, Token: optional(token)})
	if err != nil {
		return parsed{}, describe(err)
	}
	p := parsed{ID: r.Id, Time: r.Time, TimestampMs: r.TimestampMs, IDC: int(r.Idc), Node: int(r.Node),
		Worker: int(r.Worker), Sequence: int(r.Sequence), BelowFloor: r.BelowFloor}
	if p.BelowFloor {
		p.Warning = fmt.Sprintf("ID %d is below the snowflake floor of the cluster of %s: "+
			"a segment number, not a snowflake ID, and its decoded fields mean nothing", id, addr)
	}
	return p, nil
}
