package server

import (
	"context"
	"time"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/logevery"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// authLogWindow is how often at most one refused token is logged per RPC
// method: someone guessing tokens must not be able to fill the disk.
const authLogWindow = 10 * time.Second

// Token kinds, the kind field of an auth-failure log line.
const (
	authAdmin  = "admin"
	authClient = "client"
)

// authFailures records refused tokens: every one in the
// idgen_auth_failures_total{method} counter, and at most one log line per
// method per window, carrying how many lines were held back before it.
// The counter is exact; the log names who (the peer address) and what.
type authFailures struct {
	log     *zap.Logger
	counter *prometheus.CounterVec // method
	limit   *logevery.Limiter
}

// newAuthFailures returns the recorder of a node: counted in m, logged to log.
func newAuthFailures(log *zap.Logger, m *metrics) *authFailures {
	return &authFailures{log: log, counter: m.authFailures, limit: logevery.New(authLogWindow, nil)}
}

// record counts one refused token of the given kind (authAdmin or
// authClient) for method and logs it unless the method's window already
// has a line. given tells a wrong token from a missing one.
func (a *authFailures) record(ctx context.Context, method, kind string, given bool) {
	if a == nil {
		return
	}
	if a.counter != nil {
		a.counter.WithLabelValues(method).Inc()
	}
	ok, suppressed := a.limit.Allow(method)
	if !ok {
		return
	}
	a.log.Warn("refused an RPC: missing or wrong token", zap.String("method", method), zap.String("kind", kind),
		zap.String("caller", callerAddr(ctx)), zap.Bool("token_given", given), zap.Int("suppressed", suppressed),
		zap.Duration("window", a.limit.Window()))
}

// authFailed records a refused token for the RPC in ctx (see
// authFailures.record). NextIDs' refusals (decided in the issuer) go
// through here too, with kind authClient.
func (h *handler) authFailed(ctx context.Context, method, kind string, given bool) {
	h.auth.record(ctx, method, kind, given)
}

// clientAuth enforces the shared client token on ParseID, Clock and
// ListWorkers when the node has one: what they reveal (the cluster's
// layout, its members and their addresses) is for the callers that may
// take IDs. The admin token is accepted too, so an operator needs only one.
func (h *handler) clientAuth(ctx context.Context, method string, token *string) error {
	if h.clientToken == "" || tokenOK(token, h.clientToken) || (h.adminToken != "" && tokenOK(token, h.adminToken)) {
		return nil
	}
	h.authFailed(ctx, method, authClient, token != nil && *token != "")
	return &idl.IdgenError{Code: idl.ErrorCode_UNAUTHENTICATED,
		Message: method + " needs the client token: set the request's token field to the token of the node's --client-token-file (idctl: --client-token, IDGEN_CLIENT_TOKEN or IDGEN_CLIENT_TOKEN_FILE)"}
}

// rpcMethod names the RPC being served ("unknown" outside an RPC).
func rpcMethod(ctx context.Context) string {
	if ri := rpcinfo.GetRPCInfo(ctx); ri != nil && ri.Invocation() != nil && ri.Invocation().MethodName() != "" {
		return ri.Invocation().MethodName()
	}
	return "unknown"
}
