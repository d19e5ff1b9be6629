package server

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/idgen/idgen/internal/logevery"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/worker"
)

// Bounds of the status page. It is built from memory except for two reads
// (the cluster's members, the businesses); each read is shared by the
// pages asked for at once, kept a few seconds, and waited for at most
// statusReadWait, so the page answers in about that time with ZooKeeper or
// the store down, and a refreshing browser costs them one read per TTL.
const (
	statusListMax     = 200              // members and businesses shown; the rest are counted
	statusReadWait    = 2 * time.Second  // a page waits this long for a read, then says "unavailable"
	statusReadBudget  = 10 * time.Second // a read goes on in the background this long, for the next page
	statusMembersTTL  = 2 * time.Second  // heartbeat ages move: read again soon
	statusBizsTTL     = 5 * time.Second  // a full business list is a heavier read
	statusDescMax     = 80               // characters of a business description shown
	statusRefreshMin  = 2                // ?refresh=N, seconds: at least
	statusRefreshMax  = 3600             // and at most
	statusAgeWarn     = 10 * time.Second // a member's heartbeat older than this is flagged
	statusRenderTTL   = time.Second      // a rendered page is served again for this long (per view)
	statusCSP         = "default-src 'none'; style-src 'unsafe-inline'"
	statusTimeLayout  = "2006-01-02 15:04:05Z07:00"
	statusMilliLayout = "2006-01-02 15:04:05.000Z07:00"
)

// statusPage serves GET /status on the admin port: one HTML page (no
// script, inline CSS only) with what an operator looks at first in an
// incident: the node's state and each channel's readiness (nd.status(),
// the picture /readyz answers), its worker slot, the cluster's members
// (the ListWorkers source), the businesses, and the last refused RPCs.
//
// It is as safe as the rest of the admin port: GET and HEAD only, every
// value escaped by html/template, a CSP that allows no script and no
// resource from anywhere (inline CSS only), no framing, no caching, no
// secret (business keys and token hashes are dropped when the list is
// read, before anything is kept or rendered), and bounded lists.
//
// Who sees what (statusAccess): the page lists what ListBiz guards with
// the admin token, and other callers' refusals, so when the node has a
// token (Run always has an admin token) it needs one, as a bearer token or
// as the password of HTTP basic authentication (a browser asks for it):
//   - the admin token: the whole page;
//   - the client token: the node, its channels, its worker slot and the
//     members, what Clock and ListWorkers already answer to that token,
//     without the businesses, the refusals (other callers' requests) and
//     the ZooKeeper session id;
//   - no token: 401, or with --status-public the public summary (the
//     node's state and its channels' readiness, what /readyz answers).
//
// A node without any token (tests, embedders) shows the whole page and
// says that it is open. Each view is rendered at most once per
// statusRenderTTL whatever the number of readers: a flood of reloads costs
// one render a second per view, not a core.
type statusPage struct {
	nd      *node
	log     *zap.Logger
	wait    time.Duration // statusReadWait; tests shorten it
	members readCache[[]*idl.Worker]
	bizs    readCache[bizList]

	refused  *prometheus.CounterVec // idgen_auth_failures_total (nil: not counted)
	denyLog  *logevery.Limiter      // refused readers: one line per authLogWindow
	now      func() time.Time       // the render cache's clock; tests drive it
	ttl      time.Duration          // statusRenderTTL; tests set 0 for a fresh render per page
	renders  atomic.Int64           // pages rendered (the cache's misses), for tests
	rendered sync.Map               // statusLevel -> *renderCache
}

// statusAccess is who may read /status: the node's tokens ("": none) and
// --status-public.
type statusAccess struct {
	admin, client string
	public        bool
}

// statusLevel is what a reader of /status may see.
type statusLevel int

const (
	levelNone   statusLevel = iota // nothing: 401
	levelPublic                    // state and channel readiness
	levelClient                    // node, channels, slot, members
	levelAdmin                     // everything
	levelOpen                      // everything, on a node without tokens
)

func newStatusPage(nd *node, m *metrics, log *zap.Logger) *statusPage {
	p := &statusPage{nd: nd, log: log, wait: statusReadWait,
		members: readCache[[]*idl.Worker]{ttl: statusMembersTTL}, bizs: readCache[bizList]{ttl: statusBizsTTL},
		denyLog: logevery.New(authLogWindow, nil), now: time.Now, ttl: statusRenderTTL}
	if m != nil {
		p.refused = m.authFailures
	}
	return p
}

// levelOf decides what the request may see from its token: a bearer token
// (Authorization: Bearer T) or the password of basic authentication (any
// user name), compared in constant time. given reports whether a token
// was sent at all.
func (p *statusPage) levelOf(r *http.Request) (lvl statusLevel, given bool) {
	a := p.nd.access
	if a.admin == "" && a.client == "" {
		return levelOpen, false
	}
	var tok *string
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, t, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") { // the scheme is case-insensitive (RFC 9110)
			t = strings.TrimSpace(t)
			tok = &t
		} else if _, pw, ok := r.BasicAuth(); ok {
			tok = &pw
		}
	}
	switch {
	case tokenOK(tok, a.admin):
		return levelAdmin, true
	case tokenOK(tok, a.client):
		return levelClient, true
	case a.public && tok == nil:
		return levelPublic, false
	}
	return levelNone, tok != nil
}

// deny answers 401 with how to pass a token; counted in
// idgen_auth_failures_total{method="/status"} and logged at most once per
// authLogWindow (a reader without the token may reload in a loop).
func (p *statusPage) deny(w http.ResponseWriter, r *http.Request, given bool) {
	if p.refused != nil {
		p.refused.WithLabelValues(statusAuthMethod).Inc()
	}
	if ok, suppressed := p.denyLog.Allow("deny"); ok {
		p.log.Warn("refused /status: missing or wrong token", zap.String("caller", r.RemoteAddr), zap.Bool("token_given", given),
			zap.Int("suppressed", suppressed), zap.Duration("window", p.denyLog.Window()))
	}
	what := "/status needs a token"
	if given {
		what = "wrong token for /status"
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="idgen status", charset="UTF-8"`)
	http.Error(w, what+": send Authorization: Bearer <token> (the admin token shows the whole page, the client token the node, its channels, slot and members), "+
		"for example curl -H \"Authorization: Bearer $(cat data/admin.token)\" http://HOST:8889/status; a browser asks for it: any user name, the token as the password. "+
		"For dashboards without a token, start the node with --status-public (state and channel readiness only).", http.StatusUnauthorized)
}

// statusAuthMethod is the method label of /status in idgen_auth_failures_total.
const statusAuthMethod = "/status"

// renderCache holds one view's last rendering.
type renderCache struct {
	group singleflight.Group
	mu    sync.Mutex
	at    time.Time
	body  []byte
}

// refreshMark stands in the rendered page where ?refresh=N puts its meta
// refresh (and is dropped without one), so that one rendering serves every
// N. (Not a comment: html/template drops comments.)
const refreshMark = `<meta name="idgen-refresh">`

func (p *statusPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", statusCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: /status answers GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	lvl, given := p.levelOf(r)
	if lvl == levelNone {
		p.deny(w, r, given)
		return
	}
	start := time.Now()
	body, err := p.page(lvl)
	if err != nil {
		p.log.Error("rendering /status", zap.Error(err))
		http.Error(w, "rendering the status page failed (the node logged why)", http.StatusInternalServerError)
		return
	}
	refresh := ""
	if n := refreshParam(r.URL.Query().Get("refresh")); n > 0 {
		refresh = `<meta http-equiv="refresh" content="` + strconv.Itoa(n) + `">`
	}
	body = bytes.Replace(body, []byte(refreshMark), []byte(refresh), 1) // a copy: the cached page stays as it is
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
	p.log.Debug("served /status", zap.Duration("took", time.Since(start)), zap.Int("bytes", len(body)))
}

// page returns the rendering of lvl's view, at most p.ttl old: concurrent
// readers of a stale one share one render. The render does not depend on
// any one reader's request (nor end with it): a reader that leaves does
// not fail the others.
func (p *statusPage) page(lvl statusLevel) ([]byte, error) {
	c0, _ := p.rendered.LoadOrStore(lvl, &renderCache{})
	c := c0.(*renderCache)
	fresh := func() []byte {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.body != nil && p.now().Sub(c.at) < p.ttl {
			return c.body
		}
		return nil
	}
	if b := fresh(); b != nil {
		return b, nil
	}
	b, err, _ := c.group.Do("render", func() (any, error) {
		// Again: a render may have finished between the check above and
		// this call, and its page is the one to serve.
		if b := fresh(); b != nil {
			return b, nil
		}
		now := p.now()
		v := p.build(context.Background(), now, lvl)
		// Rendered whole before anything is sent: a template error is a
		// 500, never half a page with a 200.
		var buf bytes.Buffer
		if err := statusTmpl.Execute(&buf, v); err != nil {
			return nil, err
		}
		p.renders.Add(1)
		c.mu.Lock()
		c.body, c.at = buf.Bytes(), now
		c.mu.Unlock()
		return buf.Bytes(), nil
	})
	if err != nil {
		return nil, err
	}
	return b.([]byte), nil
}

// refreshParam reads ?refresh=N: a page that reloads itself every N
// seconds (a meta refresh, no script), for a screen left open in an
// incident; 0 (none) when absent or out of bounds.
func refreshParam(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < statusRefreshMin || n > statusRefreshMax {
		return 0
	}
	return n
}

// statusView is everything the template shows, already formatted: the
// template only lays it out.
type statusView struct {
	Access   accessView
	Now      string
	Node     nodeView
	Channels []channelView
	Slot     slotView
	Members  membersView
	Bizs     bizsView
	Refusals refusalsView
}

// accessView says which view the page is and what it leaves out.
type accessView struct {
	Note                  string // shown at the top ("" for the admin view)
	Details               bool   // version, mode, cluster, uptime, pid
	Slot, Members         bool
	Bizs, Refusals, Links bool
}

// accessOf is what lvl shows.
func accessOf(lvl statusLevel) accessView {
	switch lvl {
	case levelOpen:
		return accessView{Note: "This page is open to anyone who reaches the admin port: the node has no admin or client token.",
			Details: true, Slot: true, Members: true, Bizs: true, Refusals: true, Links: true}
	case levelClient:
		return accessView{Note: "Client view: the businesses and the refused calls need the admin token.",
			Details: true, Slot: true, Members: true}
	case levelPublic:
		return accessView{Note: "Public summary (--status-public): the rest of the page needs a token."}
	}
	return accessView{Details: true, Slot: true, Members: true, Bizs: true, Refusals: true, Links: true}
}

type nodeView struct {
	State, Class, Reason string
	Ready                bool
	Wait                 string // start-up wait remaining ("" when none)
	Version, Mode        string
	Cluster              string
	Uptime, Started      string
	PID                  int
	Floor                string
}

type channelView struct {
	Name, State, Class string
	Ready, FallBack    bool
	Reason, RetryAfter string
}

type slotView struct {
	Held       bool
	Why        string // no slot: why
	LeaseState string
	LeaseClass string
	Worker     int
	IDC, Node  int
	HighWater  string // the mark as a time
	MarkAhead  string // the mark relative to now ("+2.9s ahead", "1.2s behind")
	MarkClass  string
	Heartbeat  string // last successful mark write, as an age
	LastUsed   string
	NotBefore  string
	Wait       string // start-up wait remaining, "none"
	Registry   string // the worker registry's connection, when there is one
	Offset     string // this node's clock against the registry's
	Layout     string
}

type membersView struct {
	Unavailable string // why the listing could not be read now ("" when read)
	Stale       string // a failed read shows the last good one: how old
	Groups      []memberGroup
	Total, More int
}

type memberGroup struct {
	IDC  int32
	Rows []memberView
}

type memberView struct {
	Node, Worker     int32
	Addr             string
	PID              int32
	Version, Started string
	Age, AgeClass    string
	Offset, Mark     string
	Member           string
	Self             bool
}

type bizsView struct {
	Unavailable string
	Stale       string
	Rows        []bizView
	Total, More int
}

// bizView is what the page shows of a business: no key, no token hash.
type bizView struct {
	Name, Channel, Mode string
	Fallback            bool
	Format              string
	Obfuscated          bool
	Limits              string
	Tokens              int // how many own client tokens (never the tokens)
	Description         string
}

// bizList is one read of the business list, cut to statusListMax rows.
type bizList struct {
	Rows  []bizView
	Total int
}

type refusalsView struct {
	Counts []codeCount
	Total  uint64
	Recent []refusalView
	Kept   int
}

type refusalView struct {
	Time, Ago         string
	Method, Biz, Code string
	Message           string
}

// build gathers lvl's view of the page: the node's own state from memory,
// the members and businesses through their caches (concurrently, each
// waited for at most p.wait), only what the view shows.
func (p *statusPage) build(ctx context.Context, now time.Time, lvl statusLevel) statusView {
	nd := p.nd
	st := nd.status()
	s := nd.serving.Load()
	v := statusView{Access: accessOf(lvl), Now: now.UTC().Format(statusTimeLayout)}
	v.Node = nodeView{State: st.State, Class: stateClass(st.State), Reason: st.Reason, Ready: st.Ready, Version: version,
		Mode: nd.mode, Cluster: nd.cluster, Uptime: fmtDur(now.Sub(nd.startedAt).Round(time.Second)),
		Started: nd.startedAt.UTC().Format(statusTimeLayout), PID: os.Getpid()}
	if st.WaitRemainingMs > 0 {
		v.Node.Wait = fmtDur(time.Duration(st.WaitRemainingMs) * time.Millisecond)
	}
	for _, name := range []string{"snowflake", "unordered", "ordered"} {
		c, ok := st.Channels[name]
		if !ok {
			continue
		}
		cv := channelView{Name: name, State: c.State, Class: stateClass(c.State), Ready: c.Ready, FallBack: c.CanFallBack, Reason: c.Reason}
		if c.RetryAfterMs > 0 {
			cv.RetryAfter = fmtDur(time.Duration(c.RetryAfterMs) * time.Millisecond)
		}
		v.Channels = append(v.Channels, cv)
	}
	if v.Access.Refusals {
		v.Refusals = refusalsOf(nd.refusals, now)
	}
	if !v.Access.Details {
		// The public summary: state and channels only.
		v.Node = nodeView{State: v.Node.State, Class: v.Node.Class, Reason: v.Node.Reason, Ready: v.Node.Ready, Wait: v.Node.Wait}
		return v
	}
	if s == nil {
		why := "starting: " + nd.starting()
		v.Slot = slotView{Why: why}
		v.Members.Unavailable, v.Bizs.Unavailable = why, why
		return v
	}
	v.Node.Floor = strconv.FormatInt(nd.floor, 10)
	v.Slot = slotOf(s, now, lvl != levelClient)

	var (
		wg            sync.WaitGroup
		members, good readResult[[]*idl.Worker]
		bizs, goodB   readResult[bizList]
	)
	// A failed read is logged once per read (at most once per TTL), not
	// once per page: a refreshing browser must not flood the log.
	wg.Go(func() {
		if !v.Access.Members {
			return
		}
		members, good = p.members.get(ctx, p.wait, func(ctx context.Context) ([]*idl.Worker, error) {
			ws, err := nd.workers(ctx, -1)
			if err != nil {
				p.log.Warn("status page: listing the members failed", zap.Error(err))
			}
			return ws, err
		})
	})
	wg.Go(func() {
		if !v.Access.Bizs {
			return
		}
		bizs, goodB = p.bizs.get(ctx, p.wait, func(ctx context.Context) (bizList, error) {
			l, err := readBizs(ctx, s)
			if err != nil {
				p.log.Warn("status page: listing the businesses failed", zap.Error(err))
			}
			return l, err
		})
	})
	wg.Wait()
	self := s.is.Worker()
	v.Members = membersOf(members, good, self, now)
	v.Bizs = bizsOf(bizs, goodB, now)
	return v
}

// slotOf is what the node knows of its own worker lease, from memory;
// session: show the ZooKeeper session id (not in the client view).
func slotOf(s *serving, now time.Time, session bool) slotView {
	v := slotView{LeaseState: string(s.lease.State())}
	v.LeaseClass = map[worker.State]string{worker.StateRegistered: "ok", worker.StateDegraded: "warn"}[s.lease.State()]
	if v.LeaseClass == "" {
		v.LeaseClass = "bad"
	}
	ws := worker.Status{State: s.lease.State()}
	if sl, ok := s.lease.(interface{ Status() worker.Status }); ok {
		ws = sl.Status()
		if _, isZK := s.lease.(*worker.ZKLease); isZK {
			v.Registry = "ZooKeeper disconnected"
			if ws.ZKConnected {
				v.Registry = "ZooKeeper connected"
				if session {
					v.Registry = fmt.Sprintf("ZooKeeper connected (session %#x)", ws.SessionID)
				}
			}
		}
		if ws.ClockOffsetKnown {
			v.Offset = signedDur(ws.ClockOffset)
		}
		if !ws.LastHeartbeat.IsZero() {
			v.Heartbeat = fmtDur(now.Sub(ws.LastHeartbeat)) + " ago"
		}
	}
	slot, held := s.lease.Slot()
	m := s.lease.Meta()
	v.Layout = fmt.Sprintf("%d IDC bits, %d node bits, epoch %s", m.IDCBits, m.NodeBits, time.UnixMilli(m.EpochMs).UTC().Format(statusTimeLayout))
	if !held {
		v.Why = "no worker slot held (lease " + string(s.lease.State()) + ")"
		if sf := s.is.SnowflakeState(); sf.Reason != "" {
			v.Why += ": " + sf.Reason
		}
		return v
	}
	v.Held, v.Worker, v.IDC, v.Node = true, slot.Worker, slot.IDC, slot.Node
	hw := max(ws.HighWater, slot.HighWater)
	if hw > 0 {
		v.HighWater = time.UnixMilli(hw).UTC().Format(statusMilliLayout)
		d := time.UnixMilli(hw).Sub(now)
		v.MarkAhead, v.MarkClass = "+"+fmtDur(d)+" ahead", "ok"
		if d < 0 {
			v.MarkAhead, v.MarkClass = fmtDur(-d)+" behind now: the mark is being extended", "warn"
		}
	}
	if lu := s.is.LastUsed(); lu > 0 {
		v.LastUsed = time.UnixMilli(lu).UTC().Format(statusMilliLayout)
	}
	if slot.NotBefore > 0 {
		v.NotBefore = time.UnixMilli(slot.NotBefore).UTC().Format(statusMilliLayout)
	}
	v.Wait = "none"
	if sf := s.is.SnowflakeState(); sf.State == chStarting && sf.RetryAfter > 0 {
		v.Wait = fmtDur(sf.RetryAfter)
	}
	return v
}

// readBizs reads the business list for the page.
func readBizs(ctx context.Context, s *serving) (bizList, error) {
	all, err := s.is.ListBiz(ctx)
	if err != nil {
		return bizList{}, err
	}
	return bizListOf(all), nil
}

// bizListOf keeps what the page shows of the first statusListMax
// businesses by name: the key and the token hashes are dropped here,
// before the list is cached, so no secret is held for the page or reaches
// the template.
func bizListOf(all []segment.Biz) bizList {
	slices.SortFunc(all, func(a, b segment.Biz) int { return strings.Compare(a.Name, b.Name) })
	out := bizList{Total: len(all)}
	for _, b := range all[:min(len(all), statusListMax)] {
		lim := "-"
		switch {
		case b.RateLimit > 0 && b.IDQuota > 0:
			lim = fmt.Sprintf("%d req/s, %d IDs/s", b.RateLimit, b.IDQuota)
		case b.RateLimit > 0:
			lim = fmt.Sprintf("%d req/s", b.RateLimit)
		case b.IDQuota > 0:
			lim = fmt.Sprintf("%d IDs/s", b.IDQuota)
		}
		out.Rows = append(out.Rows, bizView{Name: b.Name, Channel: strings.ToUpper(b.Channel.String()), Mode: b.OrderedMode.String(),
			Fallback: b.Fallback, Format: b.Format.String(), Obfuscated: b.Obfuscate, Limits: lim, Tokens: len(b.Tokens),
			Description: clip(b.Description, statusDescMax)})
	}
	return out
}

func membersOf(cur, good readResult[[]*idl.Worker], self int, now time.Time) membersView {
	var v membersView
	ws := cur.val
	if cur.err != nil {
		v.Unavailable = cur.err.Error()
		if good.at.IsZero() {
			return v
		}
		ws, v.Stale = good.val, fmtDur(now.Sub(good.at).Round(time.Second))
	}
	v.Total = len(ws)
	if len(ws) > statusListMax {
		v.More = len(ws) - statusListMax
		ws = ws[:statusListMax]
	}
	pid := int32(os.Getpid())
	for _, w := range ws {
		if len(v.Groups) == 0 || v.Groups[len(v.Groups)-1].IDC != w.Idc {
			v.Groups = append(v.Groups, memberGroup{IDC: w.Idc})
		}
		age := time.Duration(w.HeartbeatAgeMs) * time.Millisecond
		mv := memberView{Node: w.Node, Worker: w.Worker, Addr: net.JoinHostPort(w.Host, strconv.Itoa(int(w.Port))), PID: w.Pid,
			Version: w.Version, Age: fmtDur(age), Offset: signedDur(time.Duration(w.ClockOffsetMs) * time.Millisecond),
			Member: w.Member, Self: int(w.Worker) == self && w.Pid == pid}
		if mv.Version == "" {
			mv.Version = "-"
		}
		if w.StartedAtMs > 0 {
			mv.Started = time.UnixMilli(w.StartedAtMs).UTC().Format(statusTimeLayout)
		}
		if w.HeartbeatMs > 0 {
			mv.Mark = signedDur(time.UnixMilli(w.HeartbeatMs).Sub(now))
		}
		if age > statusAgeWarn {
			mv.AgeClass = "warn"
		}
		g := &v.Groups[len(v.Groups)-1]
		g.Rows = append(g.Rows, mv)
	}
	return v
}

func bizsOf(cur, good readResult[bizList], now time.Time) bizsView {
	var v bizsView
	l := cur.val
	if cur.err != nil {
		v.Unavailable = cur.err.Error()
		if good.at.IsZero() {
			return v
		}
		l, v.Stale = good.val, fmtDur(now.Sub(good.at).Round(time.Second))
	}
	v.Rows, v.Total, v.More = l.Rows, l.Total, l.Total-len(l.Rows)
	return v
}

func refusalsOf(r *refusals, now time.Time) refusalsView {
	var v refusalsView
	v.Counts, v.Total = r.counts()
	for _, e := range r.recent() {
		v.Recent = append(v.Recent, refusalView{Time: e.At.UTC().Format(statusMilliLayout), Ago: fmtDur(now.Sub(e.At)) + " ago",
			Method: e.Method, Biz: e.Biz, Code: e.Code, Message: e.Message})
	}
	v.Kept = refusalRingSize
	return v
}

// stateClass is the colour of a node or channel state.
func stateClass(state string) string {
	switch state {
	case chServing:
		return "ok"
	case chDegraded, chStarting, chJump:
		return "warn"
	case chDisabled:
		return "off"
	}
	return "bad"
}

// fmtDur is a duration as an operator reads it: milliseconds below a
// second, tenths below a minute, whole seconds above.
func fmtDur(d time.Duration) string {
	switch a := d.Abs(); {
	case a < time.Second:
		return d.Round(time.Millisecond).String()
	case a < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// signedDur is an offset with its sign.
func signedDur(d time.Duration) string {
	if d >= 0 {
		return "+" + fmtDur(d)
	}
	return fmtDur(d)
}

// readResult is one read of a dependency; at is zero when never read.
type readResult[T any] struct {
	val T
	err error
	at  time.Time
}

// readCache shares one dependency read among the pages asked for at once
// and keeps its result for ttl: a read that hangs (a ZooKeeper session
// reconnecting) holds one goroutine, not one per page, and a page never
// waits for it longer than it chooses. It also keeps the last successful
// read, which the page shows (marked stale) while the dependency is down.
type readCache[T any] struct {
	ttl   time.Duration
	group singleflight.Group

	mu   sync.Mutex
	last readResult[T] // the latest read, failed or not
	good readResult[T] // the latest successful read
}

// get returns a read at most ttl old, reading again when the last is
// older; it waits at most wait (or until ctx ends) for a read under way,
// which then goes on in the background (up to statusReadBudget) so that a
// later page finds its result. good is the last successful read.
func (c *readCache[T]) get(ctx context.Context, wait time.Duration, read func(context.Context) (T, error)) (cur, good readResult[T]) {
	c.mu.Lock()
	last, good := c.last, c.good
	c.mu.Unlock()
	if !last.at.IsZero() && time.Since(last.at) < c.ttl {
		return last, good
	}
	ch := c.group.DoChan("read", func() (any, error) {
		rctx, cancel := context.WithTimeout(context.Background(), statusReadBudget)
		defer cancel()
		res := readResult[T]{}
		func() {
			// singleflight re-panics a panicking read in a goroutine of its
			// own, which would end the process: a status page must not.
			defer func() {
				if p := recover(); p != nil {
					res.err = fmt.Errorf("read failed: panic: %v", p)
				}
			}()
			res.val, res.err = read(rctx)
		}()
		res.at = time.Now()
		c.mu.Lock()
		c.last = res
		if res.err == nil {
			c.good = res
		}
		c.mu.Unlock()
		return res, nil
	})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case r := <-ch:
		c.mu.Lock()
		good = c.good
		c.mu.Unlock()
		return r.Val.(readResult[T]), good
	case <-t.C:
		return readResult[T]{err: fmt.Errorf("no answer within %v (still trying in the background)", wait)}, good
	case <-ctx.Done():
		return readResult[T]{err: ctx.Err()}, good
	}
}

var statusTmpl = template.Must(template.New("status").Parse(statusHTML))

// statusHTML is the page. No script and no external resource: the CSP
// forbids both, and the page must read the same in a text browser.
const statusHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="idgen-refresh">
<title>idgen {{.Node.State}}{{if .Access.Details}} · {{.Node.Cluster}}{{end}}</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d232a;background:#f4f6f8}
main{max-width:1180px;margin:0 auto;padding:16px 20px 32px}
h1{font-size:20px;margin:0 0 4px}
h2{font-size:15px;margin:10px 0 6px;padding-bottom:4px;border-bottom:1px solid #d5dbe1}
h3{font-size:13px;margin:10px 0 4px;color:#4a5560}
section{background:#fff;border:1px solid #dde3e8;border-radius:6px;padding:2px 14px 10px;margin-top:12px}
.grid{display:grid;grid-template-columns:minmax(0,1.15fr) minmax(0,1fr);gap:12px;margin-top:12px}
.grid section{margin-top:0}
@media (max-width:900px){.grid{grid-template-columns:minmax(0,1fr)}}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eef1f4;vertical-align:top}
th{font-weight:600;color:#4a5560;background:#f8fafb}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;font-size:12px;color:#fff}
.badge.ok{background:#1f883d}.badge.warn{background:#bf8700}.badge.bad{background:#cf222e}.badge.off{background:#8c959f}
.big{font-size:16px;padding:3px 12px}
td.warn,span.warn{color:#9a6700;font-weight:600}td.bad,span.bad{color:#cf222e;font-weight:600}
.muted{color:#65717d}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:13px;margin:6px 0}
.kv dt{color:#4a5560}.kv dd{margin:0}
.note{background:#fff8c5;border:1px solid #e9d66b;border-radius:4px;padding:6px 10px;margin:6px 0;font-size:13px}
.err{background:#ffebe9;border:1px solid #ffb3ad;border-radius:4px;padding:6px 10px;margin:6px 0;font-size:13px}
tr.self td{background:#eef6ff}
tr.grp td{background:#f8fafb;color:#4a5560;font-weight:600;padding-top:8px}
.counts{display:flex;flex-wrap:wrap;gap:6px;margin:6px 0 2px}
.counts span{background:#eef1f4;border-radius:4px;padding:2px 8px;font-size:13px}
.msg{max-width:520px;word-break:break-word}
footer{margin-top:18px;font-size:12px;color:#65717d}
</style>
</head>
<body>
<main>
<header>
<h1>idgen <span class="badge big {{.Node.Class}}">{{.Node.State}}</span>{{if .Node.Ready}} <span class="badge ok">ready</span>{{else}} <span class="badge bad">not ready</span>{{end}}</h1>
{{if .Access.Details}}<div class="muted">cluster <b>{{.Node.Cluster}}</b> · mode <b>{{.Node.Mode}}</b> · version <b>{{.Node.Version}}</b> · up {{.Node.Uptime}} (since {{.Node.Started}}) · pid {{.Node.PID}}</div>
{{end}}{{if .Access.Note}}<div class="note" id="access">{{.Access.Note}}</div>
{{end}}{{if .Node.Reason}}<div class="{{if eq .Node.Class "bad"}}err{{else}}note{{end}}">{{.Node.Reason}}{{if .Node.Wait}} (about {{.Node.Wait}} to go){{end}}</div>{{end}}
</header>

<div class="grid">
<section id="channels">
<h2>Channels</h2>
<table>
<tr><th>channel</th><th>state</th><th>ready</th><th>can fall back</th><th>why</th><th class="num">retry after</th></tr>
{{range .Channels}}<tr><td><b>{{.Name}}</b></td><td><span class="badge {{.Class}}">{{.State}}</span></td><td>{{if .Ready}}yes{{else}}no{{end}}</td><td>{{if .FallBack}}yes{{else}}-{{end}}</td><td class="msg">{{or .Reason "-"}}</td><td class="num">{{or .RetryAfter "-"}}</td></tr>
{{end}}</table>
</section>

{{if .Access.Slot}}<section id="slot">
<h2>Worker slot</h2>
{{with .Slot}}{{if .Held}}<dl class="kv">
<dt>worker</dt><dd><b>{{.Worker}}</b> (IDC {{.IDC}}, node {{.Node}}) · lease <span class="badge {{.LeaseClass}}">{{.LeaseState}}</span></dd>
<dt>high-water mark</dt><dd><span class="mono">{{or .HighWater "-"}}</span>{{if .MarkAhead}} <span class="{{.MarkClass}}">{{.MarkAhead}}</span>{{end}}</dd>
<dt>last mark write</dt><dd>{{or .Heartbeat "-"}}</dd>
<dt>last used</dt><dd><span class="mono">{{or .LastUsed "nothing issued yet"}}</span></dd>
<dt>not before</dt><dd>{{if .NotBefore}}<span class="mono">{{.NotBefore}}</span> <span class="muted">(earlier holders of the slot may have used up to this)</span>{{else}}none <span class="muted">(no earlier holder's mark to wait past)</span>{{end}}</dd>
<dt>start-up wait</dt><dd>{{.Wait}}</dd>
{{if .Registry}}<dt>registry</dt><dd>{{.Registry}}</dd>{{end}}
{{if .Offset}}<dt>clock offset</dt><dd>{{.Offset}} <span class="muted">(this node minus the registry)</span></dd>{{end}}
<dt>layout</dt><dd>{{.Layout}}</dd>
{{if $.Node.Floor}}<dt>snowflake floor</dt><dd class="mono">{{$.Node.Floor}}</dd>{{end}}
</dl>{{else}}<div class="err">{{.Why}}</div>{{if .LeaseState}}<dl class="kv"><dt>lease</dt><dd><span class="badge {{.LeaseClass}}">{{.LeaseState}}</span></dd>{{if .Registry}}<dt>registry</dt><dd>{{.Registry}}</dd>{{end}}</dl>{{end}}{{end}}{{end}}
</section>{{end}}
</div>

{{if .Access.Members}}<section id="members">
<h2>Members{{if .Members.Total}} ({{.Members.Total}}){{end}}</h2>
{{with .Members}}{{if .Unavailable}}<div class="err">unavailable: {{.Unavailable}}</div>{{end}}
{{if .Stale}}<div class="note">showing the last listing read, {{.Stale}} ago</div>{{end}}
{{if .Groups}}<table>
<tr><th class="num">node</th><th class="num">worker</th><th>address</th><th class="num">pid</th><th>version</th><th>started</th><th class="num">heartbeat age</th><th class="num">clock offset</th><th class="num">mark vs now</th><th>member</th></tr>
{{range .Groups}}<tr class="grp"><td colspan="10">IDC {{.IDC}} · {{len .Rows}} member{{if ne (len .Rows) 1}}s{{end}}</td></tr>
{{range .Rows}}<tr{{if .Self}} class="self"{{end}}><td class="num">{{.Node}}</td><td class="num">{{.Worker}}{{if .Self}} (this node){{end}}</td><td class="mono">{{.Addr}}</td><td class="num">{{.PID}}</td><td>{{.Version}}</td><td>{{.Started}}</td><td class="num {{.AgeClass}}">{{.Age}}</td><td class="num">{{.Offset}}</td><td class="num">{{or .Mark "-"}}</td><td class="mono muted">{{.Member}}</td></tr>
{{end}}{{end}}</table>
{{else}}{{if not .Unavailable}}<div class="muted">no running members</div>{{end}}{{end}}
{{if .More}}<div class="note">and {{.More}} more (idctl workers lists them all)</div>{{end}}{{end}}
</section>{{end}}

{{if .Access.Refusals}}<section id="refusals">
<h2>Refusals ({{.Refusals.Total}} since start)</h2>
{{with .Refusals}}{{if .Counts}}<div class="counts">{{range .Counts}}<span><b>{{.Code}}</b> {{.Count}}</span> {{end}}</div>
<h3>last {{len .Recent}} (at most {{.Kept}} kept), newest first</h3>
<table>
<tr><th>time (UTC)</th><th>method</th><th>business</th><th>code</th><th>message</th></tr>
{{range .Recent}}<tr><td class="mono">{{.Time}}<br><span class="muted">{{.Ago}}</span></td><td>{{.Method}}</td><td class="mono">{{or .Biz "-"}}</td><td><b>{{.Code}}</b></td><td class="msg">{{.Message}}</td></tr>
{{end}}</table>{{else}}<div class="muted">no refused calls since start</div>{{end}}{{end}}
</section>{{end}}

{{if .Access.Bizs}}<section id="businesses">
<h2>Businesses{{if .Bizs.Total}} ({{.Bizs.Total}}){{end}}</h2>
{{with .Bizs}}{{if .Unavailable}}<div class="err">unavailable: {{.Unavailable}}</div>{{end}}
{{if .Stale}}<div class="note">showing the last list read, {{.Stale}} ago</div>{{end}}
{{if .Rows}}<table>
<tr><th>name</th><th>channel</th><th>ordered mode</th><th>fallback</th><th>format</th><th>limits</th><th class="num">own tokens</th><th>description</th></tr>
{{range .Rows}}<tr><td><b>{{.Name}}</b></td><td>{{.Channel}}</td><td>{{.Mode}}</td><td>{{if .Fallback}}yes{{else}}no{{end}}</td><td>{{.Format}}{{if .Obfuscated}}, obfuscated{{end}}</td><td>{{.Limits}}</td><td class="num">{{.Tokens}}</td><td class="msg muted">{{.Description}}</td></tr>
{{end}}</table>{{else}}{{if not .Unavailable}}<div class="muted">no businesses</div>{{end}}{{end}}
{{if gt .More 0}}<div class="note">and {{.More}} more (idctl biz list shows them all)</div>{{end}}{{end}}
</section>{{end}}

<footer>generated {{.Now}} by this node's clock (served again for up to a second) · <a href="/readyz">/readyz</a>{{if .Access.Links}} · <a href="/metrics">/metrics</a>{{end}} · <a href="/status?refresh=5">refresh every 5 s</a></footer>
</main>
</body>
</html>
`
