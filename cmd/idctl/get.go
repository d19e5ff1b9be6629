package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/idgen/idgen/client"
)

// cmdGet asks a node for IDs and prints one per line.
func cmdGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCmdFlags("get", "idctl get [--addr HOST:PORT] --biz NAME [--channel C] [--count N] [--sub-key K] [--request-id R] [--client-token-file F]",
		"Asks one node for IDs and prints one per line (FIRST-LAST with --ranges).\n", stderr)
	addr := addAddrFlag(fs)
	biz := fs.String("biz", "", "business name (required)")
	channel := fs.String("channel", "", channelHelp+" (default: the business's)")
	count := fs.Int("count", 1, "number of IDs")
	subKey := fs.String("sub-key", "", "sequence key (ordered channel)")
	requestID := fs.String("request-id", "", "idempotency key (ordered channel)")
	tokens := addOldClientTokenFlags(fs)
	ranges := fs.Bool("ranges", false, "print FIRST-LAST ranges instead of one ID per line")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to try: retryable refusals (a node starting or waiting out a clock step) and refused connections are retried until then")
	tlsOpt := addTLSFlags(fs)
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
	var opts []client.CallOption
	if *channel != "" {
		ch, err := parseChannel(*channel)
		if err != nil {
			return fs.withUsage(err)
		}
		opts = append(opts, client.WithChannel(client.Channel(ch)))
	}
	if *subKey != "" {
		opts = append(opts, client.WithSubKey(*subKey))
	}
	if *requestID != "" {
		opts = append(opts, client.WithRequestID(*requestID))
	}
	if *addr == "" {
		return fs.withUsage(usageError{errors.New("--addr HOST:PORT is required (or IDGEN_ADDR)")})
	}
	// The client retries retryable refusals (after their retry_after_ms)
	// and transport failures until --timeout; an ORDERED call keeps its
	// request_id across retries, so a lost reply is answered with the
	// stored range.
	token, err := tokens.get()
	if err != nil {
		return err
	}
	tc, err := tlsOpt.config()
	if err != nil {
		return fs.withUsage(err)
	}
	if err := dialWait(ctx, *addr, *timeout); err != nil {
		return err
	}
	c, err := client.New(client.Config{Addrs: []string{*addr}, Token: token, CallTimeout: *timeout,
		RPCTimeout: *timeout, ConnectTimeout: time.Second, MaxAttempts: 1 << 20, TLS: tc})
	if err != nil {
		return fs.withUsage(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	resp, err := c.Fetch(ctx, *biz, *count, opts...)
	if err != nil {
		return describe(err)
	}
	if resp.Fallback {
		fmt.Fprintf(stderr, "note: snowflake refused; served by the %s fallback segment\n", resp.Channel)
	}
	w := bufio.NewWriter(stdout)
	for _, id := range resp.IDs {
		fmt.Fprintln(w, id)
	}
	for _, code := range resp.Codes {
		fmt.Fprintln(w, code)
	}
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
