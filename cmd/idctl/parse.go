package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/idgen/idgen/snowflake"
)

// cmdParse decodes a snowflake ID locally (no server needed).
func cmdParse(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("parse", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	epoch := fs.String("epoch", envOr("IDGEN_EPOCH", snowflake.DefaultEpoch.Format(time.RFC3339)), "cluster epoch, RFC 3339 (env IDGEN_EPOCH)")
	idcBits := fs.Int("idc-bits", snowflake.DefaultIDCBits, "IDC bits of the cluster")
	nodeBits := fs.Int("node-bits", snowflake.DefaultNodeBits, "node bits of the cluster")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{fmt.Errorf("want exactly one ID, e.g. idctl parse 7384729384729384")}
	}
	id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
	if err != nil {
		return usageError{fmt.Errorf("%q is not a 64-bit integer", fs.Arg(0))}
	}
	ep, err := time.Parse(time.RFC3339, *epoch)
	if err != nil {
		return usageError{fmt.Errorf("--epoch: %v", err)}
	}
	l := snowflake.Layout{Epoch: ep.UTC(), IDCBits: *idcBits, NodeBits: *nodeBits}.Normalize()
	if err := l.Validate(); err != nil {
		return usageError{err}
	}
	p, err := l.Parse(id)
	if err != nil {
		return err
	}
	ts := p.Time.Format("2006-01-02T15:04:05.000Z07:00")
	if *asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(map[string]any{"id": p.ID, "time": ts, "timestamp_ms": p.UnixMs, "idc": p.IDC,
			"node": p.Node, "worker": p.Worker, "sequence": p.Sequence})
	}
	_, err = fmt.Fprintf(stdout, "id:        %d\ntime:      %s\ntimestamp: %d ms\nidc:       %d\nnode:      %d\nworker:    %d\nsequence:  %d\n",
		p.ID, ts, p.UnixMs, p.IDC, p.Node, p.Worker, p.Sequence)
	return err
}
