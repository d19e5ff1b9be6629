package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/server"

	"github.com/idgen/idgen/client"
	"github.com/idgen/idgen/internal/idctlenv"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/snowflake"
)

// runCLI runs one command line in-process and returns the exit status and
// what it wrote.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = realMain(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// cleanEnv unsets the IDGEN_* variables the commands read defaults from.
func cleanEnv(t *testing.T) {
	for _, k := range idctlenv.Names {
		t.Setenv(k, "")
	}
}

func TestHelpExitsZero(t *testing.T) {
	cleanEnv(t)
	for _, c := range []struct {
		args []string
		want string // on stdout
	}{
		{[]string{"--help"}, "Run 'idctl COMMAND --help'"},
		{[]string{"-h"}, "Run 'idctl COMMAND --help'"},
		{[]string{"help"}, "Run 'idctl COMMAND --help'"},
		{[]string{"get", "--help"}, "usage: idctl get"},
		{[]string{"get", "-h"}, "usage: idctl get"},
		{[]string{"get", "--biz", "b", "--help"}, "usage: idctl get"},
		{[]string{"parse", "--help"}, "usage: idctl parse"},
		{[]string{"parse", "12", "--help"}, "usage: idctl parse"},
		{[]string{"workers", "-h"}, "usage: idctl workers"},
		{[]string{"workers", "--help"}, "IDGEN_ZK_AUTH"},
		{[]string{"bench", "--help"}, "usage: idctl bench"},
		{[]string{"bench", "-h"}, "unbounded run is refused"},
		{[]string{"biz", "--help"}, "usage: idctl biz SUBCOMMAND"},
		{[]string{"biz", "-h"}, "usage: idctl biz SUBCOMMAND"},
		{[]string{"biz", "help"}, "usage: idctl biz SUBCOMMAND"},
		{[]string{"biz", "create", "--help"}, "usage: idctl biz create"},
		{[]string{"biz", "update", "-h"}, "usage: idctl biz update"},
		{[]string{"biz", "get", "--help"}, "usage: idctl biz get"},
		{[]string{"biz", "list", "--help"}, "usage: idctl biz list"},
		{[]string{"biz", "create", "--help"}, "./data/admin.token"},
		{[]string{"biz", "token", "--help"}, "usage: idctl biz token SUBCOMMAND"},
		{[]string{"biz", "token", "create", "--help"}, "the only time it is\nshown"},
		{[]string{"help", "biz", "token", "revoke"}, "usage: idctl biz token revoke"},
		{[]string{"decode", "--help"}, "IDGEN_DATA_DIR"},
		{[]string{"db", "--help"}, "idctl db migrate --mysql-file F"},
		{[]string{"db", "-h"}, "idctl db migrate --mysql-file F"},
		{[]string{"db", "migrate", "--help"}, "usage: idctl db migrate"},
		{[]string{"db", "version", "-h"}, "usage: idctl db version"},
		{[]string{"db", "check", "--help"}, "-mysql"},
		{[]string{"help", "get"}, "usage: idctl get"},
		{[]string{"help", "biz", "create"}, "usage: idctl biz create"},
		{[]string{"help", "db"}, "idctl db migrate --mysql-file F"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, c.args...)
			if code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s", code, errOut)
			}
			if errOut != "" {
				t.Errorf("stderr not empty:\n%s", errOut)
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("stdout lacks %q:\n%s", c.want, out)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 || out != "idctl "+version+"\n" || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	cleanEnv(t)
	for _, c := range []struct {
		args []string
		want []string // on stderr
	}{
		{nil, []string{"missing command", "usage:"}},
		{[]string{"bogus"}, []string{`unknown command "bogus"`, "idctl --help"}},
		{[]string{"--bogus"}, []string{`unknown flag "--bogus"`}},
		{[]string{"get"}, []string{"--biz is required", "usage: idctl get", "idctl get --help"}},
		{[]string{"get", "--biz", "b", "--count", "0"}, []string{"--count 0"}},
		{[]string{"get", "--biz", "b", "--count", "x"}, []string{`invalid value "x" for flag -count`, "usage: idctl get"}},
		{[]string{"get", "--biz", "b", "--channel", "fast"}, []string{`--channel "fast"`, "usage: idctl get"}},
		{[]string{"get", "--biz", "b", "stray"}, []string{`unexpected argument "stray"`}},
		{[]string{"get", "--biz", "b", "--addr", ""}, []string{"--addr HOST:PORT is required"}},
		{[]string{"biz"}, []string{"missing subcommand", "usage: idctl biz SUBCOMMAND"}},
		{[]string{"biz", "frob"}, []string{`unknown subcommand "frob"`, "usage: idctl biz SUBCOMMAND"}},
		{[]string{"biz", "list", "--biz", "x"}, []string{"flag provided but not defined: -biz", "usage: idctl biz list"}},
		{[]string{"biz", "get"}, []string{"--biz is required", "usage: idctl biz get"}},
		{[]string{"biz", "create"}, []string{"--biz is required", "usage: idctl biz create"}},
		{[]string{"biz", "create", "--biz", "b", "--rate-limit", "-1"}, []string{"--rate-limit -1: want 0 (unlimited)"}},
		{[]string{"biz", "update", "--biz", "b", "--rate-limit", "-5"}, []string{"--rate-limit -5"}},
		{[]string{"biz", "create", "--biz", "b", "--low-water", "99999999999"}, []string{"--low-water 99999999999: out of range"}},
		{[]string{"biz", "create", "--biz", "b", "--no-fallback"}, []string{"not defined: -no-fallback"}},
		{[]string{"biz", "update", "--biz", "b", "--fallback", "--no-fallback"}, []string{"exclusive"}},
		{[]string{"biz", "update", "--biz", "b", "--start", "5"}, []string{"not defined: -start"}},
		{[]string{"biz", "create", "--biz", "b", "--channel", "fast"}, []string{`--channel "fast"`, "usage: idctl biz create"}},
		{[]string{"biz", "create", "--biz", "b", "--id-quota", "-1"}, []string{"--id-quota -1: want 0 (unlimited)"}},
		{[]string{"biz", "update", "--biz", "b", "--id-burst", "-1"}, []string{"--id-burst -1"}},
		{[]string{"biz", "create", "--biz", "b", "--ordered-mode", "fast"}, []string{`--ordered-mode "fast": want gapless or cached`, "usage: idctl biz create"}},
		{[]string{"biz", "update", "--biz", "b", "--ordered-mode", ""}, []string{`--ordered-mode "": want gapless or cached`}},
		{[]string{"biz", "update", "--biz", "b", "--ordered-mode", "Cached"}, []string{`--ordered-mode "Cached"`}},
		{[]string{"biz", "token"}, []string{"missing subcommand", "usage: idctl biz token SUBCOMMAND"}},
		{[]string{"biz", "token", "frob"}, []string{`unknown subcommand "frob"`}},
		{[]string{"biz", "token", "create"}, []string{"--biz is required", "usage: idctl biz token create"}},
		{[]string{"biz", "token", "revoke", "--biz", "b"}, []string{"--id is required", "idctl biz token list --biz b"}},
		{[]string{"biz", "token", "list", "--biz", "b", "--label", "x"}, []string{"not defined: -label"}},
		{[]string{"parse"}, []string{"want exactly one ID", "usage: idctl parse"}},
		{[]string{"parse", "1", "2"}, []string{"want exactly one ID"}},
		{[]string{"parse", "x"}, []string{`"x" is not a 64-bit integer`}},
		{[]string{"parse", "0"}, []string{"snowflake IDs are positive"}},
		{[]string{"parse", "--epoch", "yesterday", "5"}, []string{`--epoch "yesterday": want RFC 3339`}},
		{[]string{"parse", "--idc-bits", "11", "5"}, []string{"usage: idctl parse"}},
		{[]string{"parse", "--addr", "127.0.0.1:1", "--epoch", "2020-01-01T00:00:00Z", "5"}, []string{"--epoch and --addr are exclusive"}},
		{[]string{"parse", "--addr", "127.0.0.1:1", "--node-bits", "8", "5"}, []string{"--node-bits and --addr are exclusive"}},
		{[]string{"parse", "--addr", "127.0.0.1:1", "--timeout", "0s", "5"}, []string{"--timeout 0s"}},
		{[]string{"workers"}, []string{"--zk is required", "usage: idctl workers"}},
		{[]string{"workers", "--zk", "h:1", "--idc", "-2"}, []string{"--idc -2"}},
		{[]string{"workers", "--zk", "h:1", "extra"}, []string{`unexpected argument "extra"`}},
		{[]string{"bench"}, []string{"--biz is required", "usage: idctl bench"}},
		{[]string{"bench", "--biz", "b", "--requests", "0"}, []string{"unbounded"}},
		{[]string{"db"}, []string{"missing subcommand", "usage:", "idctl db SUBCOMMAND --help"}},
		{[]string{"db", "frob"}, []string{`unknown subcommand "frob"`}},
		{[]string{"db", "migrate", "--x"}, []string{"flag provided but not defined: -x", "idctl db migrate --help"}},
		{[]string{"db", "migrate"}, []string{"--mysql-file F or --mysql (env IDGEN_MYSQL_FILE or IDGEN_MYSQL) is required"}},
		{[]string{"help", "bogus"}, []string{`unknown command "bogus"`}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errOut)
			}
			if out != "" {
				t.Errorf("stdout not empty on a usage error:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			checkOnePrefix(t, errOut)
		})
	}
}

// checkOnePrefix asserts the error is reported once, with one prefix.
func checkOnePrefix(t *testing.T, stderr string) {
	t.Helper()
	if n := strings.Count(stderr, "idctl:"); n != 1 {
		t.Errorf("%d lines prefixed idctl:, want 1:\n%s", n, stderr)
	}
	for _, rep := range []string{"invalid argument: invalid argument", "INVALID_ARGUMENT: invalid argument", "idctl: idctl"} {
		if strings.Contains(stderr, rep) {
			t.Errorf("stderr repeats a prefix (%q):\n%s", rep, stderr)
		}
	}
}

var flagLine = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// helpFlags runs "idctl ARGS --help" and returns the flags it lists and
// its whole output.
func helpFlags(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	code, out, errOut := runCLI(t, append(slices.Clone(args), "--help")...)
	if code != 0 {
		t.Fatalf("%v --help: exit %d: %s", args, code, errOut)
	}
	var names []string
	for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	sort.Strings(names)
	return names, out
}

func TestBizFlagsPerSubcommand(t *testing.T) {
	cleanEnv(t)
	common := []string{"addr", "admin-token", "admin-token-file", "json", "timeout"}
	settings := []string{"channel", "channels", "code-min-length", "description", "fallback", "format", "id-burst", "id-quota", "low-water",
		"obfuscate", "ordered-mode", "plugins", "rate-limit", "step"}
	for _, c := range []struct {
		sub  string
		want []string
	}{
		{"list", common},
		{"get", append(slices.Clone(common), "biz")},
		{"create", append(append(slices.Clone(common), "biz", "start"), settings...)},
		{"update", append(append(slices.Clone(common), "biz", "no-fallback"), settings...)},
		{"token create", append(slices.Clone(common), "biz", "label")},
		{"token revoke", append(slices.Clone(common), "biz", "id")},
		{"token list", append(slices.Clone(common), "biz")},
	} {
		t.Run(c.sub, func(t *testing.T) {
			got, out := helpFlags(t, append([]string{"biz"}, strings.Fields(c.sub)...)...)
			want := slices.Sorted(slices.Values(c.want))
			if !slices.Equal(got, want) {
				t.Errorf("flags %v, want %v", got, want)
			}
			if strings.Contains(out, "(default -1)") {
				t.Errorf("help shows a default of -1:\n%s", out)
			}
			if slices.Contains(want, "rate-limit") {
				line := out[strings.Index(out, "  -rate-limit"):]
				line = line[:strings.Index(line, "\n  -")]
				if strings.Contains(line, "default") || !strings.Contains(line, "0 = unlimited") {
					t.Errorf("rate-limit help %q: want no default and 0 = unlimited explained", line)
				}
			}
		})
	}
}

// TestUsageMatchesFlags checks every --flag a synopsis (the top-level usage
// or a command's own) names is a flag the command takes.
func TestUsageMatchesFlags(t *testing.T) {
	cleanEnv(t)
	mentioned := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	cmds := [][]string{{"get"}, {"parse"}, {"decode"}, {"workers"}, {"bench"}, {"biz", "create"}, {"biz", "update"},
		{"biz", "get"}, {"biz", "list"}, {"biz", "token", "create"}, {"biz", "token", "revoke"}, {"biz", "token", "list"}, {"db", "migrate"}, {"db", "version"}, {"db", "check"}, {"audit"},
		{"cluster", "init"}, {"cluster", "show"}, {"cluster", "restore"}, {"cluster", "migrate"}, {"health"}}
	listed := map[string][]string{}
	for _, c := range cmds {
		flags, out := helpFlags(t, c...)
		key := strings.Join(c, " ")
		listed[key] = flags
		synopsis, _, _ := strings.Cut(out, "\n")
		for _, m := range mentioned.FindAllStringSubmatch(synopsis, -1) {
			if m[1] != "help" && !slices.Contains(flags, m[1]) {
				t.Errorf("idctl %s: usage names --%s, which it does not take (flags %v)", key, m[1], flags)
			}
		}
	}
	// The top-level usage: a line "idctl CMD ..." and its continuation lines.
	var cur []string
	for _, line := range strings.Split(usage, "\n") {
		fields := strings.Fields(line)
		if strings.HasPrefix(line, "  idctl ") && len(fields) >= 2 {
			cur = []string{fields[1]}
			if (fields[1] == "biz" || fields[1] == "db" || fields[1] == "cluster") && len(fields) >= 3 {
				cur = []string{fields[1] + " " + strings.Split(fields[2], "|")[0]}
			}
			if fields[1] == "biz" && fields[2] == "token" && len(fields) >= 4 {
				cur = nil
				for _, sub := range strings.Split(fields[3], "|") {
					cur = append(cur, "biz token "+sub)
				}
			}
		} else if !strings.HasPrefix(line, "                ") {
			cur = nil
		}
		for _, key := range cur {
			flags, ok := listed[key]
			if !ok {
				if key != "version" {
					t.Errorf("top-level usage names command %q, not checked", key)
				}
				continue
			}
			for _, m := range mentioned.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(flags, m[1]) {
					t.Errorf("top-level usage: idctl %s names --%s, which it does not take (flags %v)", key, m[1], flags)
				}
			}
		}
	}
}

func TestParseLocal(t *testing.T) {
	cleanEnv(t)
	l := snowflake.Layout{}.Normalize()
	floor := l.Floor(l.EpochMs() + localFloorAfterEpoch.Milliseconds())
	if floor != 86_400_000<<22 {
		t.Fatalf("local floor %d, want a day of milliseconds << 22", floor)
	}
	at := time.Date(2024, 5, 6, 7, 8, 9, 10e6, time.UTC)
	real := l.Compose(at.UnixMilli(), l.Worker(2, 37), 99)
	custom := snowflake.Layout{Epoch: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}.Normalize()
	for _, c := range []struct {
		name  string
		args  []string
		below bool
		check func(t *testing.T, p parsed)
	}{
		{"segment number", []string{"12"}, true, func(t *testing.T, p parsed) {
			if p.Sequence != 12 || p.TimestampMs != l.EpochMs() {
				t.Errorf("decoded %+v", p)
			}
		}},
		{"just below the local floor", []string{strconv.FormatInt(floor-1, 10)}, true, nil},
		{"at the local floor", []string{strconv.FormatInt(floor, 10)}, false, nil},
		{"a real snowflake ID", []string{strconv.FormatInt(real, 10)}, false, func(t *testing.T, p parsed) {
			if p.Time != "2024-05-06T07:08:09.010Z" || p.IDC != 2 || p.Node != 37 || p.Worker != l.Worker(2, 37) || p.Sequence != 99 {
				t.Errorf("decoded %+v", p)
			}
		}},
		{"flags after the ID", []string{strconv.FormatInt(real, 10), "--idc-bits", "2"}, false, nil},
		{"custom epoch moves the floor", []string{"--epoch", "2024-01-01T00:00:00Z", strconv.FormatInt(floor+5, 10)}, false,
			func(t *testing.T, p parsed) {
				if p.TimestampMs != custom.EpochMs()+86_400_000 {
					t.Errorf("timestamp %d", p.TimestampMs)
				}
			}},
		{"custom epoch, segment number", []string{"--epoch", "2024-01-01T00:00:00Z", "12"}, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Text: the warning goes to stderr, the fields to stdout.
			code, out, errOut := runCLI(t, append([]string{"parse"}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, "sequence:") {
				t.Errorf("stdout:\n%s", out)
			}
			if warned := strings.Contains(errOut, "warning:") && strings.Contains(errOut, "below"); warned != c.below {
				t.Errorf("warned %v, want %v; stderr %q", warned, c.below, errOut)
			}
			if c.below {
				checkOnePrefix(t, errOut)
			} else if errOut != "" {
				t.Errorf("stderr %q", errOut)
			}
			// JSON: below_floor and the warning are fields.
			code, out, errOut = runCLI(t, append([]string{"parse", "--json"}, c.args...)...)
			if code != 0 {
				t.Fatalf("--json: exit %d: %s", code, errOut)
			}
			var p parsed
			if err := json.Unmarshal([]byte(out), &p); err != nil {
				t.Fatalf("--json output %q: %v", out, err)
			}
			if p.BelowFloor != c.below || (p.Warning != "") != c.below {
				t.Errorf("below_floor %v warning %q, want below %v", p.BelowFloor, p.Warning, c.below)
			}
			if !strings.Contains(out, `"below_floor":`) {
				t.Errorf("below_floor missing from %s", out)
			}
			if c.check != nil {
				c.check(t, p)
			}
		})
	}
	t.Run("IDGEN_EPOCH", func(t *testing.T) {
		t.Setenv("IDGEN_EPOCH", "2024-01-01T00:00:00Z")
		code, out, _ := runCLI(t, "parse", "--json", strconv.FormatInt(floor, 10))
		var p parsed
		if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p.TimestampMs != custom.EpochMs()+86_400_000 {
			t.Errorf("exit %d, %s", code, out)
		}
	})
}

// fakeNode answers the RPCs idctl's tests need; the others panic (nil
// embedded interface), which the tests never call.
type fakeNode struct {
	idl.IDGenService
	mu      sync.Mutex
	creates []*idl.CreateBizRequest
	tokens  map[string][]string // method: the token each call carried ("<none>" when unset)
	afters  []string            // ListBiz: the after of each call
	// channels: NextIDs, the channel of each call.
	channels []idl.Channel
	// refuse: CreateBiz of "starting" is refused this many more times
	// (retryable, as a starting node refuses), then served.
	refuse int
}

// sawToken records the token a call of method carried.
func (f *fakeNode) sawToken(method string, tok *string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tokens == nil {
		f.tokens = map[string][]string{}
	}
	v := "<none>"
	if tok != nil {
		v = *tok
	}
	f.tokens[method] = append(f.tokens[method], v)
}

// lastToken returns the token the last call of method carried.
func (f *fakeNode) lastToken(method string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.tokens[method]; len(l) > 0 {
		return l[len(l)-1]
	}
	return "<not called>"
}

func (f *fakeNode) ParseID(_ context.Context, req *idl.ParseIDRequest) (*idl.ParseIDResponse, error) {
	f.sawToken("ParseID", req.Token)
	return &idl.ParseIDResponse{Id: req.Id, TimestampMs: 1700000000000, Time: "2023-11-14T22:13:20.000Z", Idc: 1, Node: 2,
		Worker: 258, Sequence: 3, BelowFloor: req.Id < 1000}, nil
}

func (f *fakeNode) Decode(_ context.Context, req *idl.DecodeRequest) (*idl.DecodeResponse, error) {
	f.sawToken("Decode", req.Token)
	if req.Biz != "coupon" || req.Value != "AA5PM8" {
		return nil, &idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT, Message: "unexpected " + req.Biz + " " + req.Value}
	}
	return &idl.DecodeResponse{Number: 2, Format: "code", Obfuscated: true}, nil
}

func (f *fakeNode) CreateBiz(_ context.Context, req *idl.CreateBizRequest) (*idl.Biz, error) {
	f.sawToken("CreateBiz", req.Token)
	f.mu.Lock()
	f.creates = append(f.creates, req)
	refused := req.Name == "starting" && f.refuse > 0
	if refused {
		f.refuse--
	}
	f.mu.Unlock()
	if refused {
		return nil, &idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE, Retryable: true, RetryAfterMs: 1,
			Message: "node is starting (opening the segment store): retry shortly or ask another node"}
	}
	if req.Name == "bad" {
		return nil, &idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT, Message: "invalid argument: biz \"bad\": step 0 out of range"}
	}
	return &idl.Biz{Name: req.Name, Channel: idl.Channel_SNOWFLAKE, Step: 1000, LowWaterPct: 20, StartNum: 1,
		RateLimit: req.GetRateLimit(), IdQuota: req.IdQuota, IdBurst: req.IdBurst}, nil
}

// startFakeNode serves f on a loopback port and returns its address.
func startFakeNode(t *testing.T, f *fakeNode) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startFakeNodeOn(t, f, ln)
}

// quietKitexBoth sets Kitex's log level as idctl and the client package
// each do once (get goes through the client package): before a fake
// node's server goroutine reads the level, which is a global.
func quietKitexBoth(addr string) {
	quietKitex()
	if c, err := client.New(client.Config{Addrs: []string{addr}}); err == nil {
		c.Close()
	}
}

// startFakeNodeOn serves f on ln and returns its address.
func startFakeNodeOn(t *testing.T, f *fakeNode, ln net.Listener) string {
	quietKitexBoth(ln.Addr().String()) // before the server's goroutine reads the log level
	svr := idgensvc.NewServer(f, server.WithListener(ln),
		server.WithServerBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: "idgen"}), server.WithExitWaitTime(0))
	done := make(chan error, 1)
	go func() { done <- svr.Run() }()
	t.Cleanup(func() {
		_ = svr.Stop()
		<-done
	})
	return ln.Addr().String()
}

func TestAgainstFakeNode(t *testing.T) {
	cleanEnv(t)
	t.Setenv("IDGEN_ADMIN_TOKEN", "fake-admin-token-0123456789")
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	t.Run("parse --addr below floor", func(t *testing.T) {
		code, out, errOut := runCLI(t, "parse", "--json", "--addr", addr, "12")
		var p parsed
		if code != 0 || json.Unmarshal([]byte(out), &p) != nil {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		if !p.BelowFloor || p.Warning == "" || !strings.Contains(errOut, "warning:") || p.Worker != 258 {
			t.Errorf("%+v, stderr %q", p, errOut)
		}
	})
	t.Run("parse --addr above floor", func(t *testing.T) {
		code, out, errOut := runCLI(t, "parse", "--addr", addr, "5000")
		if code != 0 || errOut != "" || !strings.Contains(out, "2023-11-14T22:13:20.000Z") || !strings.Contains(out, "worker:    258") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("create sends only the flags given", func(t *testing.T) {
		code, _, errOut := runCLI(t, "biz", "create", "--addr", addr, "--biz", "a")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		code, out, errOut := runCLI(t, "biz", "create", "--addr", addr, "--biz", "b", "--rate-limit", "0", "--json")
		if code != 0 || !strings.Contains(out, `"name": "b"`) {
			t.Fatalf("exit %d: %s %s", code, out, errOut)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		a, b := f.creates[len(f.creates)-2], f.creates[len(f.creates)-1]
		if a.RateLimit != nil || a.Step != nil || a.Fallback != nil || a.Channel != nil || a.StartNum != nil {
			t.Errorf("create without flags sent %+v", a)
		}
		if b.RateLimit == nil || *b.RateLimit != 0 {
			t.Errorf("--rate-limit 0 sent %v", b.RateLimit)
		}
	})
	t.Run("decode sends the value", func(t *testing.T) {
		for _, args := range [][]string{{"decode", "--addr", addr, "--biz", "coupon", "AA5PM8"}, {"decode", "AA5PM8", "--addr", addr, "--biz", "coupon"}} {
			code, out, errOut := runCLI(t, args...)
			if code != 0 || !strings.Contains(out, "number:     2") || !strings.Contains(out, "obfuscated: true") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		}
	})
	t.Run("server error has one prefix", func(t *testing.T) {
		code, out, errOut := runCLI(t, "biz", "create", "--addr", addr, "--biz", "bad")
		if code != 1 || out != "" {
			t.Fatalf("exit %d, stdout %q", code, out)
		}
		if errOut != "idctl: INVALID_ARGUMENT: biz \"bad\": step 0 out of range\n" {
			t.Errorf("stderr %q", errOut)
		}
		checkOnePrefix(t, errOut)
	})
}
