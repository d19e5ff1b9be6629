package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// cmdGet asks a node for IDs and prints one per line.
func cmdGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("get", stderr)
	addr := fs.String("addr", envOr("IDGEN_ADDR", "127.0.0.1:8888"), "idgen RPC address (env IDGEN_ADDR)")
	biz := fs.String("biz", "", "business name (required)")
	channel := fs.String("channel", "", "snowflake, unordered or ordered (default: the business's)")
	count := fs.Int("count", 1, "number of IDs")
	subKey := fs.String("sub-key", "", "sequence key (ordered channel)")
	requestID := fs.String("request-id", "", "idempotency key (ordered channel)")
	token := fs.String("token", envOr("IDGEN_TOKEN", ""), "client token if the server requires one (env IDGEN_TOKEN)")
	ranges := fs.Bool("ranges", false, "print FIRST-LAST ranges instead of one ID per line")
	timeout := fs.Duration("timeout", 3*time.Second, "RPC timeout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *biz == "" {
		return usageError{fmt.Errorf("--biz is required")}
	}
	req := &idl.NextIDsRequest{Biz: *biz, Count: int32(*count)}
	if *channel != "" {
		ch, err := parseChannel(*channel)
		if err != nil {
			return err
		}
		req.Channel = &ch
	}
	if *subKey != "" {
		req.SubKey = subKey
	}
	if *requestID != "" {
		req.RequestId = requestID
	}
	if *token != "" {
		req.Token = token
	}
	c, err := newClient(*addr, *timeout)
	if err != nil {
		return err
	}
	resp, err := c.NextIDs(ctx, req)
	if err != nil {
		return describe(err)
	}
	if resp.Fallback {
		fmt.Fprintf(stderr, "note: snowflake refused; served by the %s fallback segment\n", resp.Channel)
	}
	w := bufio.NewWriter(stdout)
	for _, r := range resp.Ranges {
		if *ranges {
			fmt.Fprintf(w, "%d-%d\n", r.First, r.Last)
			continue
		}
		for id := r.First; id <= r.Last; id++ {
			fmt.Fprintln(w, id)
		}
	}
	return w.Flush()
}
