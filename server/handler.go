package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/internal/logevery"
	"github.com/idgen/idgen/issuer"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/forward"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/snowflake"
)

// handler implements the IDGenService service: it checks the wire request, calls
// the issuer and maps domain errors to IdgenError in one place (toIDLError).
//
// It serves from the first moment of the process: until the node has
// started, every call that needs the issuer gets a fast retryable error
// saying what start-up is waiting for (never a hang).
type handler struct {
	node        *node
	log         *zap.Logger
	clk         clock.Clock
	cluster     string
	adminToken  string
	clientToken string
	workers     func(ctx context.Context, idc int) ([]*idl.Worker, error) // ListWorkers
	m           *metrics
	auth        *authFailures // refused tokens: counted, and logged rate-limited

	// panicLog bounds the stack traces panicked logs (made at the first
	// panic, on clk's time).
	panicOnce sync.Once
	panicLog  *logevery.Limiter
}

// issuer returns the node's issuer, or the retryable error a caller gets
// while the node is starting. code is the code that error carries.
func (h *handler) issuer(code idl.ErrorCode) (*issuer.Issuer, error) {
	if s := h.node.serving.Load(); s != nil {
		return s.is, nil
	}
	return nil, &idl.IdgenError{Code: code, Retryable: true, RetryAfterMs: 500,
		Message: "node is starting (" + h.node.starting() + "): retry shortly or ask another node"}
}

var _ idl.IDGenService = (*handler)(nil)

// NextIDs issues IDs.
func (h *handler) NextIDs(ctx context.Context, req *idl.NextIDsRequest) (resp *idl.NextIDsResponse, err error) {
	defer h.doneBiz("NextIDs", channelLabel(req), reqBiz(req), time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request: send a NextIDsRequest with biz and count")
	}
	// The token is checked by the issuer: a business with its own tokens
	// needs one of them, the others the shared client token (if any).
	r := issuer.Request{Biz: req.Biz, Count: int(req.Count), SubKey: req.GetSubKey(), RequestID: req.GetRequestId(),
		Caller: callerAddr(ctx), Token: req.GetToken()}
	if r.Count == 0 {
		// Unset or 0 means 1: Go's zero value (and a plain Thrift client
		// that leaves the field out) must not beat the IDL default.
		r.Count = 1
	}
	if req.Channel != nil {
		// SLOW_ORDERED (3), the older Java service's strict MySQL channel,
		// is a built-in strategy of the issuer: served by the ORDERED
		// processor and answered as 3.
		wire := *req.Channel
		ch := segment.Channel(wire)
		if int64(ch) != int64(wire) {
			return nil, invalid(fmt.Sprintf("channel %d: want 0 (UNORDERED), 1 (ORDERED), 2 (SNOWFLAKE) or 3 (SLOW_ORDERED)", *req.Channel))
		}
		r.Channel = &ch
	}
	code := idl.ErrorCode_WORKER_UNAVAILABLE
	if r.Channel != nil && *r.Channel != segment.ChannelSnowflake {
		code = idl.ErrorCode_SEGMENT_UNAVAILABLE
	}
	is, err := h.issuer(code)
	if err != nil {
		return nil, err
	}
	if s := h.node.serving.Load(); s != nil && s.owners != nil && forward.Routed(req) {
		// Answered by the shard's owner: forwarded whole, or served here
		// when this node owns the shard (one policy path, issue 30).
		return h.nextOrdered(ctx, is, s.owners, req, r)
	}
	out, err := is.Next(ctx, r)
	return h.nextIDsAnswer(ctx, req, out, err)
}

// nextIDsAnswer turns the issuer's answer to req into NextIDs' answer.
func (h *handler) nextIDsAnswer(ctx context.Context, req *idl.NextIDsRequest, out issuer.Response, err error) (*idl.NextIDsResponse, error) {
	if err := h.issued(ctx, "NextIDs", req.Biz, req.GetToken() != "", out, err); err != nil {
		return nil, err
	}
	resp := &idl.NextIDsResponse{Ranges: make([]*idl.IDRange, len(out.Ranges)), Channel: idl.Channel(out.Channel),
		Fallback: out.Fallback, Count: out.Count()}
	for i, rg := range out.Ranges {
		resp.Ranges[i] = &idl.IDRange{First: rg.First, Last: rg.Last}
	}
	if out.IDs != nil {
		resp.Ids = out.IDs
	}
	if out.Codes != nil {
		resp.Codes = out.Codes
	}
	if out.Fallback {
		h.log.Debug("snowflake fallback served", zap.String("biz", req.Biz), zap.NamedError("refusal", out.Refusal))
	}
	return resp, nil
}

// issued records the issuer's answer to method's request for biz in the
// metrics and returns its refusal as the IDL error (nil when it served),
// a refused token counted against method; tokenGiven: the request
// carried one.
func (h *handler) issued(ctx context.Context, method, biz string, tokenGiven bool, out issuer.Response, err error) error {
	h.m.observe(out, err)
	if err == nil {
		return nil
	}
	if errors.Is(err, issuer.ErrUnauthenticated) {
		h.authFailed(ctx, method, authClient, tokenGiven)
	}
	return h.toIDLError(biz, err)
}

// ParseID decodes a snowflake ID.
func (h *handler) ParseID(ctx context.Context, req *idl.ParseIDRequest) (resp *idl.ParseIDResponse, err error) {
	defer h.done("ParseID", "", time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request")
	}
	if err := h.clientAuth(ctx, "ParseID", req.Token); err != nil {
		return nil, err
	}
	is, err := h.issuer(idl.ErrorCode_WORKER_UNAVAILABLE)
	if err != nil {
		return nil, err
	}
	p, below, err := is.Parse(req.Id)
	if err != nil {
		return nil, h.toIDLError("", err)
	}
	return &idl.ParseIDResponse{Id: p.ID, TimestampMs: p.UnixMs, Time: p.Time.Format("2006-01-02T15:04:05.000Z07:00"),
		Idc: int32(p.IDC), Node: int32(p.Node), Worker: int32(p.Worker), Sequence: int32(p.Sequence), BelowFloor: below}, nil
}

// Clock answers peers' start checks with this node's wall clock.
func (h *handler) Clock(ctx context.Context, req *idl.ClockRequest) (resp *idl.ClockResponse, err error) {
	defer h.done("Clock", "", time.Now(), &err)
	if req == nil {
		req = &idl.ClockRequest{} // every field is optional: an empty request
	}
	if err := h.clientAuth(ctx, "Clock", req.Token); err != nil {
		return nil, err
	}
	w := -1
	if s := h.node.serving.Load(); s != nil {
		w = s.is.Worker()
	}
	return &idl.ClockResponse{NowMs: h.clk.Now().UnixMilli(), State: h.node.String(), Cluster: h.cluster,
		Worker: int32(w), Version: version}, nil
}

// ListWorkers returns the worker assignments.
func (h *handler) ListWorkers(ctx context.Context, req *idl.ListWorkersRequest) (resp *idl.ListWorkersResponse, err error) {
	defer h.done("ListWorkers", "", time.Now(), &err)
	if req == nil {
		req = &idl.ListWorkersRequest{} // every field is optional: an empty request
	}
	if err := h.clientAuth(ctx, "ListWorkers", req.Token); err != nil {
		return nil, err
	}
	idc := -1
	if req.Idc != nil {
		idc = int(*req.Idc)
	}
	ws, err := h.node.workers(ctx, idc)
	if err != nil {
		return nil, h.toIDLError("", err)
	}
	return &idl.ListWorkersResponse{Cluster: h.cluster, Workers: ws}, nil
}

// CreateBiz creates a business (admin).
func (h *handler) CreateBiz(ctx context.Context, req *idl.CreateBizRequest) (resp *idl.Biz, err error) {
	defer h.doneBiz("CreateBiz", "", reqBiz(req), time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request")
	}
	if err := h.admin(ctx, req.Token); err != nil {
		return nil, err
	}
	b := segment.Biz{Name: req.Name, Channel: segment.ChannelSnowflake, Step: req.GetStep(), LowWaterPct: int(req.GetLowWaterPct()),
		StartNum: req.GetStartNum(), Fallback: req.GetFallback(), RateLimit: int(req.GetRateLimit()), Description: req.GetDescription(),
		IDQuota: req.GetIdQuota(), IDBurst: req.GetIdBurst()}
	if req.Channel != nil {
		if err := defaultChannelOK(*req.Channel); err != nil {
			return nil, err
		}
		b.Channel = segment.Channel(*req.Channel)
	}
	if req.Channels != nil {
		if b.Channels, err = channelsFromIDL(req.Channels); err != nil {
			return nil, err
		}
		if def, ok := defaultOfChannels(b.Channels); req.Channel == nil && ok {
			b.Channel = def
		}
	}
	b.Obfuscate, b.CodeMinLength, b.Plugins = req.GetObfuscate(), int(req.GetCodeMinLength()), req.Plugins
	if req.Format != nil {
		f, err := segment.ParseFormat(*req.Format)
		if err != nil {
			return nil, h.toIDLError(req.Name, err)
		}
		b.Format = f
	}
	// Unset or empty: gapless, the default.
	mode, err := segment.ParseOrderedMode(req.GetOrderedMode())
	if err != nil {
		return nil, h.toIDLError(req.Name, err)
	}
	b.OrderedMode = mode
	is, err := h.issuer(idl.ErrorCode_SEGMENT_UNAVAILABLE)
	if err != nil {
		return nil, err
	}
	out, err := is.CreateBiz(ctx, b)
	if err != nil {
		return nil, h.toIDLError(req.Name, err)
	}
	h.log.Info("business created", zap.String("biz", out.Name), zap.String("channel", out.Channel.String()),
		zap.String("channels", segment.ChannelNames(out.Channels)))
	return bizToIDL(out), nil
}

// UpdateBiz changes a business's set fields (admin).
func (h *handler) UpdateBiz(ctx context.Context, req *idl.UpdateBizRequest) (resp *idl.Biz, err error) {
	defer h.doneBiz("UpdateBiz", "", reqBiz(req), time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request")
	}
	if err := h.admin(ctx, req.Token); err != nil {
		return nil, err
	}
	var u segment.BizUpdate
	if req.Channel != nil {
		if err := defaultChannelOK(*req.Channel); err != nil {
			return nil, err
		}
		ch := segment.Channel(*req.Channel)
		u.Channel = &ch
	}
	if req.Channels != nil {
		chs, err := channelsFromIDL(req.Channels)
		if err != nil {
			return nil, err
		}
		u.Channels = &chs
	}
	u.Step = req.Step
	if req.LowWaterPct != nil {
		v := int(*req.LowWaterPct)
		u.LowWaterPct = &v
	}
	u.Fallback = req.Fallback
	if req.RateLimit != nil {
		v := int(*req.RateLimit)
		u.RateLimit = &v
	}
	u.Description = req.Description
	u.IDQuota, u.IDBurst = req.IdQuota, req.IdBurst
	u.Obfuscate = req.Obfuscate
	if req.Format != nil {
		f, err := segment.ParseFormat(*req.Format)
		if err != nil {
			return nil, h.toIDLError(req.Name, err)
		}
		u.Format = &f
	}
	if req.CodeMinLength != nil {
		v := int(*req.CodeMinLength)
		u.CodeMinLength = &v
	}
	if req.Plugins != nil {
		u.Plugins = &req.Plugins
	}
	// Unset or empty: unchanged.
	if req.GetOrderedMode() != "" {
		mode, err := segment.ParseOrderedMode(req.GetOrderedMode())
		if err != nil {
			return nil, h.toIDLError(req.Name, err)
		}
		u.OrderedMode = &mode
	}
	is, err := h.issuer(idl.ErrorCode_SEGMENT_UNAVAILABLE)
	if err != nil {
		return nil, err
	}
	out, err := is.UpdateBiz(ctx, req.Name, u)
	if err != nil {
		return nil, h.toIDLError(req.Name, err)
	}
	h.log.Info("business updated", zap.String("biz", out.Name))
	return bizToIDL(out), nil
}

// GetBiz reads a business (admin).
func (h *handler) GetBiz(ctx context.Context, req *idl.GetBizRequest) (resp *idl.Biz, err error) {
	defer h.doneBiz("GetBiz", "", reqBiz(req), time.Now(), &err)
	if req == nil {
		return nil, invalid("missing request")
	}
	if err := h.admin(ctx, req.Token); err != nil {
		return nil, err
	}
	is, err := h.issuer(idl.ErrorCode_SEGMENT_UNAVAILABLE)
	if err != nil {
		return nil, err
	}
	out, err := is.GetBiz(ctx, req.Name)
	if err != nil {
		return nil, h.toIDLError(req.Name, err)
	}
	return bizToIDL(out), nil
}

// ListBiz lists businesses (admin).
func (h *handler) ListBiz(ctx context.Context, req *idl.ListBizRequest) (resp *idl.ListBizResponse, err error) {
	defer h.done("ListBiz", "", time.Now(), &err)
	if req == nil {
		req = &idl.ListBizRequest{} // every field is optional: an empty request
	}
	if err := h.admin(ctx, req.Token); err != nil {
		return nil, err
	}
	is, err := h.issuer(idl.ErrorCode_SEGMENT_UNAVAILABLE)
	if err != nil {
		return nil, err
	}
	// One page: the whole list of a large store would exceed what any
	// client accepts in one frame.
	bs, next, err := is.ListBizPage(ctx, req.GetAfter(), int(req.GetLimit()))
	if err != nil {
		return nil, h.toIDLError("", err)
	}
	resp = &idl.ListBizResponse{Bizs: make([]*idl.Biz, len(bs))}
	for i, b := range bs {
		resp.Bizs[i] = bizToIDL(b)
	}
	if next != "" {
		resp.Next = &next
	}
	return resp, nil
}

// admin checks the admin token. Nothing else admits a caller: an address
// proves nothing (a TTHeader header can claim any), so there is no
// loopback exception. Run always sets a token (configured, or generated
// into <data_dir>/admin.token); a handler without one refuses every admin
// call.
func (h *handler) admin(ctx context.Context, token *string) error {
	if tokenOK(token, h.adminToken) {
		return nil
	}
	given := token != nil && *token != ""
	h.authFailed(ctx, rpcMethod(ctx), authAdmin, given)
	what := "admin RPCs need the admin token"
	if given {
		what = "wrong admin token"
	}
	return &idl.IdgenError{Code: idl.ErrorCode_UNAUTHENTICATED, Message: what +
		": set the request's token field to the node's admin token, the content of its --admin-token-file or, when none is set, of <data_dir>/admin.token on the node (idctl reads it from there by itself, or takes --admin-token-file)"}
}

// tokenOK compares in constant time; an empty want (no token configured)
// matches nothing.
func tokenOK(got *string, want string) bool {
	return want != "" && got != nil && subtle.ConstantTimeCompare([]byte(*got), []byte(want)) == 1
}

// callerAddr is the RPC peer's address ("" when unknown), for plugins.
func callerAddr(ctx context.Context) string { return peerOf(rpcinfo.GetRPCInfo(ctx)) }

// peerOf is ri's peer address ("" when unknown).
func peerOf(ri rpcinfo.RPCInfo) string {
	if ri == nil || ri.From() == nil || ri.From().Address() == nil {
		return ""
	}
	return ri.From().Address().String()
}

// done runs deferred in every method: it turns a panic into INTERNAL for
// that call only, and records the call's metrics and, when it was refused,
// the refusal for the status page.
func (h *handler) done(method, channel string, start time.Time, err *error) {
	if p := recover(); p != nil { // recover works only called here, in the deferred function itself
		*err = h.panicked(method, p)
	}
	h.record(method, channel, "", start, *err)
}

// doneBiz is done for the methods that name a business, so that the status
// page says which business a refusal was about.
func (h *handler) doneBiz(method, channel, biz string, start time.Time, err *error) {
	if p := recover(); p != nil {
		*err = h.panicked(method, p)
	}
	h.record(method, channel, biz, start, *err)
}

// panicLogWindow is how often at most a panic's stack trace is logged (one
// for all methods): a caller who found a request that panics could
// otherwise write about 3 KB of log per call (2,000 calls: 6 MB in 0.4 s).
// Every panic is counted in idgen_rpc_panics_total{method}; the next line
// logged says how many were held back.
const panicLogWindow = 20 * time.Second

// panicked counts a handler's panic, logs it with the stack of the
// panicking call (the deferred function's caller) at most once per
// panicLogWindow, and returns the INTERNAL answer.
func (h *handler) panicked(method string, p any) error {
	if h.m != nil {
		h.m.panics.WithLabelValues(method).Inc()
	}
	h.panicOnce.Do(func() {
		now := time.Now
		if h.clk != nil {
			now = h.clk.Now
		}
		h.panicLog = logevery.New(panicLogWindow, now)
	})
	if ok, suppressed := h.panicLog.Allow("panic"); ok {
		h.log.Error("panic in handler: answering INTERNAL (a bug: please report it with this line)", zap.String("method", method),
			zap.Any("panic", p), zap.Int("suppressed", suppressed),
			zap.Duration("window", panicLogWindow), zap.StackSkip("stack", 2))
	}
	return &idl.IdgenError{Code: idl.ErrorCode_INTERNAL, Message: "internal error (a bug: the server logged the details)"}
}

// record counts a finished call in the metrics and keeps a refused one in
// the node's refusal log, under the same code as the metrics (an error
// that is not an IdgenError is answered, and counted, as INTERNAL).
func (h *handler) record(method, channel, biz string, start time.Time, err error) {
	h.m.rpcDone(method, channel, start, err)
	if err == nil || h.node == nil {
		return
	}
	code, msg := idl.ErrorCode_INTERNAL.String(), err.Error()
	var ie *idl.IdgenError
	if errors.As(err, &ie) {
		code, msg = ie.Code.String(), ie.Message
	}
	h.node.refusals.add(time.Now(), method, biz, code, msg)
}

// reqBiz is the business a request names ("" for a nil request).
func reqBiz(req any) string {
	switch r := req.(type) {
	case *idl.NextIDsRequest:
		if r != nil {
			return r.Biz
		}
	case *idl.CreateBizRequest:
		if r != nil {
			return r.Name
		}
	case *idl.UpdateBizRequest:
		if r != nil {
			return r.Name
		}
	case *idl.GetBizRequest:
		if r != nil {
			return r.Name
		}
	}
	return ""
}

// channelLabel is the metrics label of the requested channel.
func channelLabel(req *idl.NextIDsRequest) string {
	if req == nil || req.Channel == nil {
		return "default"
	}
	if *req.Channel == idl.Channel_SLOW_ORDERED {
		return segment.ChannelOrdered.String()
	}
	if *req.Channel < 0 || *req.Channel > 2 {
		return "invalid"
	}
	return segment.Channel(*req.Channel).String()
}

// defaultChannelOK refuses SLOW_ORDERED as a business's default channel
// with a message that says what to use: it is a request-side alias of
// ORDERED for the older Java clients, not a channel of its own.
func defaultChannelOK(ch idl.Channel) error {
	if ch == idl.Channel_SLOW_ORDERED {
		return invalid("channel 3 (SLOW_ORDERED) cannot be a business's default channel: set 1 (ORDERED), which serves the same numbers; callers that send SLOW_ORDERED are answered as before")
	}
	return nil
}

func invalid(msg string) error {
	return &idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT, Message: msg}
}

// toIDLError maps a domain error to the IDL exception. It is the only place
// that decides codes and retryability.
func (h *handler) toIDLError(biz string, err error) error {
	var ie *idl.IdgenError
	if errors.As(err, &ie) {
		return ie
	}
	e := &idl.IdgenError{Message: trimSentinel(err.Error())}
	switch {
	case errors.Is(err, issuer.ErrInvalid), errors.Is(err, segment.ErrInvalid), errors.Is(err, snowflake.ErrInvalid),
		errors.Is(err, segment.ErrRequestMismatch):
		e.Code = idl.ErrorCode_INVALID_ARGUMENT
	case errors.Is(err, issuer.ErrUnauthenticated):
		e.Code = idl.ErrorCode_UNAUTHENTICATED
	case errors.Is(err, issuer.ErrMasterKey):
		// A configuration fault of this node, not of the request: the
		// message names the fix (--master-key-file).
		e.Code = idl.ErrorCode_INTERNAL
		h.log.Error("business key unavailable", zap.String("biz", biz), zap.Error(err))
	case errors.Is(err, ext.ErrRejected):
		// A plugin's policy refused this caller or request: a decision,
		// not a malformed request nor a passing state.
		e.Code = idl.ErrorCode_PERMISSION_DENIED
	case errors.Is(err, segment.ErrUnknownBiz):
		e.Code = idl.ErrorCode_UNKNOWN_BIZ
		e.Message = fmt.Sprintf("unknown business %q: create it with 'idctl biz create --biz %s' (or the CreateBiz RPC)", biz, biz)
	case errors.Is(err, segment.ErrBizExists), errors.Is(err, segment.ErrOutputLocked):
		e.Code = idl.ErrorCode_INVALID_ARGUMENT
	case errors.Is(err, clock.ErrRollback):
		e.Code, e.Retryable = idl.ErrorCode_CLOCK_ROLLBACK, true
	case errors.Is(err, snowflake.ErrClockJump):
		e.Code, e.Retryable = idl.ErrorCode_CLOCK_JUMP, true
	case errors.Is(err, issuer.ErrNoWorker), errors.Is(err, snowflake.ErrNotYet), errors.Is(err, snowflake.ErrStopped):
		e.Code, e.Retryable = idl.ErrorCode_WORKER_UNAVAILABLE, true
	case errors.Is(err, segment.ErrNoSegments):
		e.Code = idl.ErrorCode_SEGMENT_UNAVAILABLE // a configuration, not a passing state: not retryable
	case errors.Is(err, segment.ErrUnavailable), errors.Is(err, segment.ErrRegressed):
		e.Code, e.Retryable, e.RetryAfterMs = idl.ErrorCode_SEGMENT_UNAVAILABLE, true, 200
		var ue *ordered.UnavailableError
		if errors.As(err, &ue) && ue.RetryAfter > 0 {
			// An ORDERED owner's hint: the end of a lease wait, or a
			// hand-off about to finish.
			e.RetryAfterMs = max(1, ue.RetryAfter.Milliseconds())
		}
	case errors.Is(err, segment.ErrExhausted), errors.Is(err, snowflake.ErrTimeOverflow):
		e.Code = idl.ErrorCode_EXHAUSTED
	case errors.Is(err, issuer.ErrRateLimited):
		e.Code, e.Retryable = idl.ErrorCode_RATE_LIMITED, true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		e.Code, e.Retryable = idl.ErrorCode_SEGMENT_UNAVAILABLE, true
		e.Message = "request deadline passed before the store answered: " + err.Error()
	default:
		e.Code = idl.ErrorCode_INTERNAL
		h.log.Error("unexpected error: answering INTERNAL", zap.String("biz", biz), zap.Error(err))
	}
	if e.Retryable && e.RetryAfterMs == 0 {
		if s := h.node.serving.Load(); s != nil {
			if d := s.is.RetryAfter(err); d > 0 {
				e.RetryAfterMs = max(1, d.Milliseconds())
			}
		}
	}
	return e
}

// trimSentinel drops a leading sentinel text such as "invalid argument: "
// from a domain error's message: the code already says it, and
// "INVALID_ARGUMENT: invalid argument: ..." reads as a stutter.
func trimSentinel(msg string) string {
	for _, p := range []string{issuer.ErrInvalid.Error() + ": ", segment.ErrInvalid.Error() + ": ", snowflake.ErrInvalid.Error() + ": "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

func bizToIDL(b segment.Biz) *idl.Biz {
	return &idl.Biz{Name: b.Name, Channel: idl.Channel(b.Channel), Step: b.Step, LowWaterPct: int32(b.LowWaterPct),
		StartNum: b.StartNum, Fallback: b.Fallback, RateLimit: int32(b.RateLimit), Description: b.Description,
		CreatedAtMs: msOrZero(b.CreatedAt), UpdatedAtMs: msOrZero(b.UpdatedAt),
		// Never the key.
		Obfuscate: &b.Obfuscate, Format: ptr(b.Format.String()), CodeMinLength: ptr(int32(b.CodeMinLength)),
		Plugins: b.Plugins, Issued: &b.Issued, IdQuota: &b.IDQuota, IdBurst: &b.IDBurst, Tokens: tokensToIDL(b.Tokens),
		OrderedMode: ptr(b.OrderedMode.String()), Channels: channelsToIDL(b.Channels)}
}

// tokensToIDL lists a business's tokens without their hashes.
func tokensToIDL(ts []segment.BizToken) []*idl.BizToken {
	out := make([]*idl.BizToken, len(ts))
	for i, t := range ts {
		out[i] = &idl.BizToken{Id: t.ID, Label: t.Label, CreatedAtMs: msOrZero(t.CreatedAt)}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func msOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
