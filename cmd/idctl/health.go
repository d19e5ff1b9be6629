package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/idgen/idgen/internal/idctlenv"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

const healthAbout = `Asks a node's admin HTTP port whether it lives (/healthz) or, with --ready
or --channel, whether it is ready (/readyz, /readyz?channel=NAME), and exits
0 when it is, 1 when it is not or does not answer within --timeout: one line
on stdout or stderr says which and why. It needs no curl, so a container
built FROM scratch runs it as its HEALTHCHECK.

--admin-addr defaults to IDGEN_ADMIN_ADDR (the node's own setting, so inside the
node's container or unit it names that node), else 127.0.0.1:8889; an empty
or wildcard host (:8889, 0.0.0.0:8889) means this host's loopback. No HTTP
proxy is used. /readyz is 503 while the node starts and while a channel it
is configured for can neither serve nor fall back; ?channel=snowflake (or
unordered, ordered) is strict: not ready whenever that channel refuses.
`

// healthBodyMax bounds what is read of an answer: /readyz is a few hundred
// bytes.
const healthBodyMax = 64 << 10

// readyzBody is the part of /readyz's JSON (server/node.go's status) that
// the messages use.
type readyzBody struct {
	Ready           bool   `json:"ready"`
	State           string `json:"state"`
	Reason          string `json:"reason"`
	WaitRemainingMs int64  `json:"wait_remaining_ms"`
	Mode            string `json:"mode"`
	Channels        map[string]struct {
		State        string `json:"state"`
		Ready        bool   `json:"ready"`
		CanFallBack  bool   `json:"can_fall_back"`
		Reason       string `json:"reason"`
		RetryAfterMs int64  `json:"retry_after_ms"`
	} `json:"channels"`
}

// cmdHealth probes /healthz or /readyz of one node.
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCmdFlags("health", "idctl health [--admin-addr HOST:PORT] [--ready] [--channel snowflake|unordered|ordered] [--timeout D]", healthAbout, stderr)
	addr := fs.String("admin-addr", envOr(idctlenv.AdminAddr, "127.0.0.1:8889"), "the node's admin HTTP address `HOST:PORT` (env "+idctlenv.AdminAddr+"), not its RPC address")
	// --addr is the RPC address in every other command; health took it for
	// the admin address before.
	fs.deprecated("addr", "admin-addr")
	ready := fs.Bool("ready", false, "ask /readyz (readiness) instead of /healthz (liveness)")
	channel := fs.String("channel", "", "ask /readyz?channel=NAME: ready only while that channel itself serves (implies --ready)")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long (connect and answer)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fs.usageErr("--timeout %v: want a positive duration such as 2s", *timeout)
	}
	switch *channel {
	case "", "snowflake", "unordered", "ordered":
	default:
		return fs.usageErr("--channel %q: want snowflake, unordered or ordered", *channel)
	}
	hostPort, err := healthHostPort(*addr)
	if err != nil {
		return fs.usageErr("--admin-addr %q: %v", *addr, err)
	}
	url := "http://" + hostPort + "/healthz"
	if *ready || *channel != "" {
		url = "http://" + hostPort + "/readyz"
		if *channel != "" {
			url += "?channel=" + *channel
		}
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	// No proxy (a probe must reach the node itself), no connection kept.
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("unhealthy: GET %s: no answer within %v", url, *timeout)
		}
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "malformed HTTP") {
			// Something listens there but does not speak HTTP: most
			// likely the node's RPC port, given for the admin port.
			return fmt.Errorf("unhealthy: GET %s: %v: %s", url, err, notAdminPort(ctx, hostPort))
		}
		return fmt.Errorf("unhealthy: GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, healthBodyMax))
	if err != nil {
		return fmt.Errorf("unhealthy: GET %s: reading the answer: %v", url, err)
	}

	if !*ready && *channel == "" {
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("unhealthy: GET %s answered %s: %s", url, resp.Status, oneLine(body))
		}
		fmt.Fprintf(stdout, "healthy: GET %s answered %s\n", url, resp.Status)
		return nil
	}

	var st readyzBody
	if jerr := json.Unmarshal(body, &st); jerr != nil {
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("not ready: GET %s answered %s: %s", url, resp.Status, oneLine(body))
		}
		return fmt.Errorf("not ready: GET %s answered %s with a body that is not /readyz JSON: %v", url, resp.Status, jerr)
	}
	what := describeReadyz(st, *channel)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: GET %s answered %s: %s", url, resp.Status, what)
	}
	fmt.Fprintf(stdout, "ready: GET %s answered %s: %s\n", url, resp.Status, what)
	return nil
}

// notAdminPort says what answers on hostPort, which accepted the
// connection and closed it without an HTTP answer: a node's RPC port when
// a Thrift call there is answered (even refused), else not an admin port.
func notAdminPort(ctx context.Context, hostPort string) string {
	fix := fmt.Sprintf("health asks the node's admin HTTP port: --admin-addr (env %s, default 127.0.0.1:8889)", idctlenv.AdminAddr)
	c, err := newClient(ctx, hostPort, healthProbeTimeout)
	if err == nil {
		_, err = c.Clock(ctx, &idl.ClockRequest{})
		var ie *idl.IdgenError
		if err == nil || errors.As(err, &ie) {
			return fmt.Sprintf("%s is a node's RPC port (the --addr of get), not its admin port; %s", hostPort, fix)
		}
	}
	return fmt.Sprintf("%s does not speak HTTP, so it is no node's admin port; %s", hostPort, fix)
}

// healthProbeTimeout bounds the Thrift call that tells a node's RPC port.
const healthProbeTimeout = time.Second

// healthHostPort turns --admin-addr into a host:port to dial: an empty or
// wildcard host is this host's loopback (the node's own admin_addr is
// often ":8889" or "0.0.0.0:8889").
func healthHostPort(addr string) (string, error) {
	if strings.Contains(addr, "/") {
		return "", errors.New("want HOST:PORT (no scheme or path)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if port == "" {
		return "", errors.New("missing port")
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}

// describeReadyz says in one line what /readyz reported: the node's state,
// and the channel asked for or every channel that is not ready, with why.
func describeReadyz(st readyzBody, channel string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "state %s", orDash(st.State))
	if st.Mode != "" {
		fmt.Fprintf(&b, ", mode %s", st.Mode)
	}
	if st.Reason != "" {
		fmt.Fprintf(&b, ": %s", st.Reason)
	}
	if st.WaitRemainingMs > 0 {
		fmt.Fprintf(&b, " (wait %d ms)", st.WaitRemainingMs)
	}
	names := make([]string, 0, len(st.Channels))
	for name, c := range st.Channels {
		if name == channel || (channel == "" && !c.Ready) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		c := st.Channels[name]
		fmt.Fprintf(&b, "; %s %s", name, orDash(c.State))
		if !c.Ready && c.CanFallBack {
			b.WriteString(" (falls back to segments)")
		}
		if c.Reason != "" {
			fmt.Fprintf(&b, ": %s", c.Reason)
		}
		if c.RetryAfterMs > 0 {
			fmt.Fprintf(&b, " (retry after %d ms)", c.RetryAfterMs)
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine is an answer's body fit for one line of a message.
func oneLine(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
