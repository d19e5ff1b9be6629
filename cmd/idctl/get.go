package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgen"
)

// cmdGet asks a node for IDs and prints one per line.
func cmdGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCmdFlags("get", "idctl get --addr HOST:PORT --biz NAME [--channel C] [--count N] [--sub-key K] [--request-id R]",
		"Asks one node for IDs and prints one per line (FIRST-LAST with --ranges).\n")
	addr := fs.String("addr", envOr("IDGEN_ADDR", "127.0.0.1:8888"), "idgen RPC address (env IDGEN_ADDR)")
	biz := fs.String("biz", "", "business name (required)")
	channel := fs.String("channel", "", "snowflake, unordered or ordered (default: the business's)")
	count := fs.Int("count", 1, "number of IDs")
	subKey := fs.String("sub-key", "", "sequence key (ordered channel)")
	requestID := fs.String("request-id", "", "idempotency key (ordered channel)")
	token := fs.String("token", envOr("IDGEN_TOKEN", ""), "client token if the server requires one (env IDGEN_TOKEN)")
	ranges := fs.Bool("ranges", false, "print FIRST-LAST ranges instead of one ID per line")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to try: retryable refusals (a node starting or waiting out a clock step) and refused connections are retried until then")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	switch {
	case *biz == "":
		return fs.usageErr("--biz is required")
	case *count < 1 || *count > math.MaxInt32:
		return fs.usageErr("--count %d: want a positive number", *count)
	case *timeout <= 0:
		return fs.usageErr("--timeout %v: want a positive duration", *timeout)
	}
	req := &idl.NextIDsRequest{Biz: *biz, Count: int32(*count)}
	if *channel != "" {
		ch, err := parseChannel(*channel)
		if err != nil {
			return fs.withUsage(err)
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
		return fs.withUsage(err)
	}
	resp, err := nextWithRetry(ctx, c, req, *timeout)
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

// nextWithRetry calls NextIDs until it succeeds, fails for good or timeout
// has passed. It retries only what issued nothing: a typed retryable
// refusal (after its retry_after_ms) and a connection the node did not
// accept (a node that is restarting). An RPC that timed out is not
// retried: its IDs may have been issued and the reply lost.
func nextWithRetry(ctx context.Context, c idgensvc.Client, req *idl.NextIDsRequest, timeout time.Duration) (*idl.NextIDsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		resp, err := c.NextIDs(ctx, req)
		if err == nil {
			return resp, nil
		}
		wait, again := retryAfter(err)
		if !again {
			return nil, err
		}
		if dl, _ := ctx.Deadline(); time.Until(dl) < wait {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// retryAfter says whether err is worth retrying and after how long.
func retryAfter(err error) (time.Duration, bool) {
	var ie *idl.IdgenError
	if errors.As(err, &ie) {
		if !ie.Retryable {
			return 0, false
		}
		return min(max(time.Duration(ie.RetryAfterMs)*time.Millisecond, 20*time.Millisecond), time.Second), true
	}
	msg := err.Error()
	if strings.Contains(msg, "connection refused") || strings.Contains(msg, "get connection error") {
		return 50 * time.Millisecond, true
	}
	return 0, false
}
