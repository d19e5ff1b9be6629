// Package client is the Go client of the idgen ID service: it finds the
// nodes of a cluster, spreads calls over them, fails over and retries what
// is safe to retry, and can keep a local buffer of prefetched IDs.
//
//	c, err := client.New(client.Config{Addrs: []string{"10.0.0.1:8888", "10.0.0.2:8888"}})
//	if err != nil { ... }
//	defer c.Close()
//	id, err := c.Next(ctx, "order")                       // one ID, the business's channel
//	rs, err := c.NextN(ctx, "order", 100, client.WithChannel(client.Snowflake))
//	r, err := c.Ordered(ctx, "invoice", "tenant-7", 1)    // strictly increasing per sub key
//
// # Nodes
//
// Config.Addrs is a static list. With Config.ZK and Config.Cluster the
// client reads the member znodes of the cluster
// (/<root>/<cluster>/idc-<n>/members/m-*, the same ones `idctl workers`
// shows) and watches them: a node that joins takes calls, a node that
// leaves stops getting them, without a restart. A node whose ZooKeeper
// session has not yet expired after a crash is still listed; the client
// then meets a refused connection, moves to another node and leaves the
// dead one alone for a growing back-off.
//
// # Retries
//
// A call is bounded by its context (Config.CallTimeout when the context has
// no deadline) and by Config.MaxAttempts. Within that:
//
//   - a retryable refusal (an IdgenError with retryable set: a node
//     starting, a clock step, a store outage, a rate limit) moves to another
//     node; the refusing node is not asked again before its retry_after_ms;
//   - a transport failure (connection refused or reset, RPC timeout) moves
//     to another node. When the request may have reached the server, a
//     retry is still safe: on UNORDERED and SNOWFLAKE a lost reply only
//     leaves a gap, and an ORDERED (or SLOW_ORDERED) call always carries a
//     request_id, generated when the caller gives none and kept across
//     retries, so the server answers a retry with the range it stored;
//   - every other error comes back at once.
//
// Retryable tells a caller whether an error this package returned is worth
// trying again later, and after how long.
//
// # Errors
//
// A refusal's code is an ErrorCode: errors.Is(err, client.ErrUnknownBiz)
// (one sentinel per code of the IDL, each documented with whether it is
// retryable) or a switch on client.Code(err), without importing the
// generated kitex_gen package. The client's own failures are ErrClosed,
// ErrNoNodes, ErrRetryBudget, ErrInvalid and ErrNotPrefetchable; an *Error
// says which node was asked last and how many attempts were made.
//
// # Prefetch
//
// Config.Prefetch turns on a local buffer of IDs per business and channel
// (UNORDERED and SNOWFLAKE only: ORDERED IDs are never prefetched, they
// must be strictly increasing across callers). Next and NextN then take IDs
// from the buffer; a background refill, one in flight per business and
// channel, tops it up at a low-water mark, and the batch it asks for adapts
// to the rate the buffer is drained at. SNOWFLAKE IDs carry their issue time:
// PrefetchConfig.MaxAge bounds how old a buffered one may be when handed
// out. Close drops the buffer; an ID is handed out at most once.
//
// Prefetched IDs that are never handed out (dropped by Close, by a process
// exit, or for being older than MaxAge) are gaps: they are never issued
// again, by this client or any other. Use prefetch where gaps are fine and
// the call rate is high.
//
// # Logging
//
// Kitex's own logger is process-wide and by default writes retry warnings
// to stderr on every failed call; New sets it to fatal-only unless
// Config.KitexLogs is true.
package client
