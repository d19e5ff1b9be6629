package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/internal/idctlenv"
	"github.com/idgen/idgen/internal/secretfile"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/zkown"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/zkguard"
	"github.com/idgen/idgen/snowflake"
)

// Config is the whole server configuration. Every field has a YAML key, a
// flag and an IDGEN_* environment twin (see options); precedence is
// defaults < YAML file < environment < flags.
type Config struct {
	RPCAddr   string `yaml:"rpc_addr"`
	AdminAddr string `yaml:"admin_addr"`
	DataDir   string `yaml:"data_dir"`

	ZK         string `yaml:"zk"`
	ZKRoot     string `yaml:"zk_root"`
	ZKAuth     string `yaml:"zk_auth"`
	ZKAuthFile string `yaml:"zk_auth_file"`
	// ZKSingleServerUnwitnessed accepts --zk with one server and no
	// --mysql (see Validate: nothing outside that server can tell a new
	// node that it was restored from an older copy).
	ZKSingleServerUnwitnessed bool          `yaml:"zk_single_server_unwitnessed"`
	ZKSessionTimeout          time.Duration `yaml:"zk_session_timeout"`
	Cluster                   string        `yaml:"cluster"`
	IDC                       int           `yaml:"idc"`
	Node                      int           `yaml:"node"`
	PropertiesDir             string        `yaml:"properties_dir"`
	AdvertiseHost             string        `yaml:"advertise_host"`
	AllowCachedSlot           bool          `yaml:"allow_cached_slot"`
	MaxPeerSkew               time.Duration `yaml:"max_peer_clock_skew"`
	Heartbeat                 time.Duration `yaml:"heartbeat_interval"`
	OutageTolerance           time.Duration `yaml:"outage_tolerance"`

	Epoch           string        `yaml:"epoch"`
	IDCBits         int           `yaml:"idc_bits"`
	NodeBits        int           `yaml:"node_bits"`
	MaxBackwardWait time.Duration `yaml:"max_backward_wait"`

	MySQL         string `yaml:"mysql"`
	MySQLFile     string `yaml:"mysql_file"`
	MySQLMaxConns int    `yaml:"mysql_max_conns"`
	// MySQLAcceptUnsafe lets the node start on a MySQL server that is not
	// crash-safe (innodb_flush_log_at_trx_commit or sync_binlog not 1).
	MySQLAcceptUnsafe bool          `yaml:"mysql_accept_unsafe_durability"`
	StoreTimeout      time.Duration `yaml:"store_timeout"`
	// OrderedBarrierWait bounds how long ORDERED waits, after the MySQL
	// server changed, for every node to raise the rows it remembers.
	OrderedBarrierWait time.Duration `yaml:"ordered_barrier_wait"`
	// OrderedLease is the lease of a node's ORDERED shard ownership (with
	// --zk): a node that cannot renew it stops answering for its shards,
	// and a node taking a shard over waits it out after the last renewal
	// it saw, so it is also what an owner's crash costs those shards.
	//
	// Why 1s by default (issue 31: a SIGKILLed owner's keys serve again
	// elsewhere within 1.5 s): a takeover serves from the last observed
	// renewal + lease + margin (lease/20 + 5ms), observed at a poll every
	// lease/6, so a crash costs about 1.1-1.3 s (3.5 s with the former 3s).
	// The cost:
	//   - ZooKeeper writes: every node renews every lease/3, 3 writes/s per
	//     node (1/s with 3s), and lists and reads nodes/ every lease/6
	//     (6 rounds/s per node);
	//   - a renewal must be answered within lease/3 (333ms): a ZooKeeper
	//     ensemble slower than that (fsync stalls) counts as a failed
	//     renewal, and about lease - margin (945ms) without a successful
	//     one loses the lease;
	//   - a process or VM pause (GC, swap, live migration) longer than the
	//     lease minus the margin minus the time since the last renewal
	//     (605ms..945ms) breaks the lease: every shard of the node is lost,
	//     its keys are refused (retryable) for about one lease while
	//     another node takes them over, a cached business skips one
	//     reservation per key, and the shards come back by a planned
	//     hand-off once the node is live for a lease again.
	// Raise it (e.g. 3s) where such pauses are expected; it must not
	// exceed zk_session_timeout.
	OrderedLease time.Duration `yaml:"ordered_lease"`
	// OrderedWindow sizes the reservations of businesses in cached mode:
	// about this much of the key's recent traffic.
	OrderedWindow time.Duration `yaml:"ordered_window"`
	MaxStep       int64         `yaml:"max_step"`
	SegmentTTL    time.Duration `yaml:"segment_duration"`

	AutoCreateBiz string `yaml:"auto_create_biz"` // "auto" (standalone only), "true", "false"
	MaxBatch      int    `yaml:"max_batch"`
	MaxFrameBytes int    `yaml:"max_frame_bytes"`
	AdminToken    string `yaml:"admin_token"`
	ClientToken   string `yaml:"client_token"`
	// The *File twins name a file holding the secret (its surrounding
	// whitespace trimmed), so it never shows in /proc/PID/cmdline or the
	// environment. Setting both forms is refused.
	AdminTokenFile  string `yaml:"admin_token_file"`
	ClientTokenFile string `yaml:"client_token_file"`
	// MasterKeyFile holds the key that wraps every business's obfuscation
	// key: the stores then hold no usable key.
	MasterKeyFile string `yaml:"master_key_file"`
	// StatusPublic serves /status's public summary (the node's state and
	// its channels' readiness, what /readyz answers) to callers without a
	// token, for dashboards; the rest of the page still needs a token.
	StatusPublic bool `yaml:"status_public"`
	// AutoCreateMax bounds auto-creation: a business is created on first
	// use only while the store holds fewer businesses than this.
	AutoCreateMax int `yaml:"auto_create_max"`
	// MetricsMaxBizs bounds the per-business metric series: businesses
	// beyond the first this many seen get the label biz="_other".
	MetricsMaxBizs int `yaml:"metrics_max_bizs"`

	// Transport limits and TLS.
	MaxConns        int           `yaml:"max_connections"`
	ConnIdleTimeout time.Duration `yaml:"conn_idle_timeout"`
	TLSCert         string        `yaml:"tls_cert"`
	TLSKey          string        `yaml:"tls_key"`
	TLSClientCA     string        `yaml:"tls_client_ca"`
	// MaxConnsPerSource caps the RPC connections one source address
	// (IPv4 address, IPv6 /64) holds at once, so one host cannot hold
	// the slots everyone else needs (issue 30); 0: a quarter of the
	// effective max_connections.
	MaxConnsPerSource int `yaml:"max_connections_per_source"`
	// AuditFile is where the audit plugin appends its JSON lines ("":
	// <data_dir>/audit.jsonl, one file per node in every mode).
	AuditFile string `yaml:"audit_file"`

	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	LogLevel        string        `yaml:"log_level"`
	LogFormat       string        `yaml:"log_format"`
}

// DefaultConfig returns the standalone defaults: no ZooKeeper, no MySQL,
// data under ./data.
func DefaultConfig() Config {
	return Config{
		RPCAddr:            ":8888",
		AdminAddr:          ":8889",
		DataDir:            "./data",
		ZKRoot:             "/idgen",
		ZKSessionTimeout:   10 * time.Second,
		Cluster:            "default",
		Node:               -1,
		AllowCachedSlot:    false,
		MaxPeerSkew:        time.Second,
		Heartbeat:          3 * time.Second,
		OutageTolerance:    30 * time.Second,
		Epoch:              snowflake.DefaultEpoch.Format(time.RFC3339),
		IDCBits:            snowflake.DefaultIDCBits,
		NodeBits:           snowflake.DefaultNodeBits,
		MaxBackwardWait:    clock.DefaultMaxBackwardWait,
		MySQLMaxConns:      32,
		StoreTimeout:       2 * time.Second,
		OrderedBarrierWait: zkguard.DefaultBarrierWait,
		OrderedLease:       zkown.DefaultLease,
		OrderedWindow:      ordered.DefaultWindow,
		MaxStep:            100_000_000,
		SegmentTTL:         15 * time.Minute,
		AutoCreateBiz:      "auto",
		AutoCreateMax:      256,
		MetricsMaxBizs:     200,
		MaxConns:           4096,
		ConnIdleTimeout:    2 * time.Minute,
		MaxBatch:           segment.MaxBatch,
		MaxFrameBytes:      1 << 20,
		ShutdownTimeout:    10 * time.Second,
		LogLevel:           "info",
		LogFormat:          "json",
	}
}

// option binds one setting to its flag, environment variable and field.
type option struct {
	name  string // flag name; env is IDGEN_ + upper(name with - as _)
	usage string
	set   func(c *Config, v string) error
	get   func(c *Config) string
	// isBool: the flag may be given without a value (--allow-cached-slot
	// means true), like the standard library's bool flags.
	isBool bool
}

func (o option) env() string {
	return "IDGEN_" + strings.ToUpper(strings.ReplaceAll(o.name, "-", "_"))
}

func strOpt(name, usage string, f func(*Config) *string) option {
	return option{name, usage,
		func(c *Config, v string) error { *f(c) = v; return nil },
		func(c *Config) string { return *f(c) }, false}
}

func intOpt(name, usage string, f func(*Config) *int) option {
	return option{name, usage,
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("want an integer, got %q", v)
			}
			*f(c) = n
			return nil
		},
		func(c *Config) string { return strconv.Itoa(*f(c)) }, false}
}

func int64Opt(name, usage string, f func(*Config) *int64) option {
	return option{name, usage,
		func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("want an integer, got %q", v)
			}
			*f(c) = n
			return nil
		},
		func(c *Config) string { return strconv.FormatInt(*f(c), 10) }, false}
}

func durOpt(name, usage string, f func(*Config) *time.Duration) option {
	return option{name, usage,
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("want a duration such as 5ms or 10s, got %q", v)
			}
			*f(c) = d
			return nil
		},
		func(c *Config) string { return f(c).String() }, false}
}

func boolOpt(name, usage string, f func(*Config) *bool) option {
	return option{name, usage,
		func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			*f(c) = b
			return nil
		},
		func(c *Config) string { return strconv.FormatBool(*f(c)) }, true}
}

// options lists every setting. The README's configuration table is this list.
var options = []option{
	strOpt("rpc-addr", "Thrift RPC listen address", func(c *Config) *string { return &c.RPCAddr }),
	strOpt("admin-addr", "admin HTTP listen address (/metrics, /healthz, /readyz, /status)", func(c *Config) *string { return &c.AdminAddr }),
	strOpt("data-dir", "standalone data directory (embedded segment store, properties file)", func(c *Config) *string { return &c.DataDir }),
	strOpt("zk", "ZooKeeper servers HOST:PORT,...; switches on cluster worker registration and cluster-wide businesses", func(c *Config) *string { return &c.ZK }),
	strOpt("zk-root", "ZooKeeper root znode", func(c *Config) *string { return &c.ZKRoot }),
	strOpt("zk-auth", "ZooKeeper digest credentials user:password (ACL on the cluster subtree); prefer --zk-auth-file", func(c *Config) *string { return &c.ZKAuth }),
	strOpt("zk-auth-file", "file holding the ZooKeeper digest credentials user:password", func(c *Config) *string { return &c.ZKAuthFile }),
	boolOpt(ZKSingleServerUnwitnessedOpt, "accept --zk with a single ZooKeeper server and no --mysql: a restore of that server from an older copy is then not seen by a node that starts first after it, and IDs may repeat (restore only with `idctl cluster restore`; see zk_single_server_unwitnessed)", func(c *Config) *bool { return &c.ZKSingleServerUnwitnessed }),
	durOpt("zk-session-timeout", "ZooKeeper session timeout", func(c *Config) *time.Duration { return &c.ZKSessionTimeout }),
	strOpt("cluster", "cluster name (one ZooKeeper subtree per cluster)", func(c *Config) *string { return &c.Cluster }),
	intOpt("idc", "IDC number of this node", func(c *Config) *int { return &c.IDC }),
	intOpt("node", "standalone only: pin the node number; -1: chosen by the node (a crash restart moves to a slot whose mark has passed)", func(c *Config) *int { return &c.Node }),
	strOpt("properties-dir", "directory of the worker properties file (default: data-dir)", func(c *Config) *string { return &c.PropertiesDir }),
	strOpt("advertise-host", "host peers use to reach this node (default: first non-loopback IP, else 127.0.0.1)", func(c *Config) *string { return &c.AdvertiseHost }),
	boolOpt("allow-cached-slot", "use the cached worker slot when ZooKeeper is unreachable at start", func(c *Config) *bool { return &c.AllowCachedSlot }),
	durOpt("max-peer-clock-skew", "refuse to start when the clock is further than this from the peers' median", func(c *Config) *time.Duration { return &c.MaxPeerSkew }),
	durOpt("heartbeat-interval", "how often the worker slot's high-water mark is written ahead", func(c *Config) *time.Duration { return &c.Heartbeat }),
	durOpt("outage-tolerance", "how long SNOWFLAKE keeps serving while ZooKeeper (or the MySQL worker table) is unreachable: marks are written this far ahead; a crashed node's slot is free again after about this long", func(c *Config) *time.Duration { return &c.OutageTolerance }),
	strOpt("epoch", "snowflake epoch, RFC 3339 (cluster-wide)", func(c *Config) *string { return &c.Epoch }),
	intOpt("idc-bits", "worker bits for the IDC (cluster-wide; idc-bits + node-bits = 10)", func(c *Config) *int { return &c.IDCBits }),
	intOpt("node-bits", "worker bits for the node (cluster-wide)", func(c *Config) *int { return &c.NodeBits }),
	durOpt("max-backward-wait", "largest clock step back that is waited out instead of refused", func(c *Config) *time.Duration { return &c.MaxBackwardWait }),
	strOpt("mysql", "MySQL/MariaDB DSN user:pass@tcp(host:port)/db; switches on the MySQL store (and, without --zk, MySQL-held worker slots)", func(c *Config) *string { return &c.MySQL }),
	strOpt("mysql-file", "file holding the MySQL DSN (keeps the password off the command line)", func(c *Config) *string { return &c.MySQLFile }),
	intOpt("mysql-max-conns", "MySQL connection pool size", func(c *Config) *int { return &c.MySQLMaxConns }),
	boolOpt("mysql-accept-unsafe-durability", "start even if MySQL is not crash-safe (innodb_flush_log_at_trx_commit or sync_binlog not 1): a MySQL crash may then lose reservations and repeat IDs", func(c *Config) *bool { return &c.MySQLAcceptUnsafe }),
	durOpt("store-timeout", "deadline of one segment store call (ORDERED requests wait at most this)", func(c *Config) *time.Duration { return &c.StoreTimeout }),
	durOpt("ordered-lease", "ORDERED shard ownership lease (with --zk): an owner that cannot renew it stops answering; a new owner waits it out, so it is what an owner's crash costs its shards", func(c *Config) *time.Duration { return &c.OrderedLease }),
	durOpt("ordered-window", "a cached-mode business's ORDERED reservation holds about this much of the key's recent traffic (what an owner's crash can skip)", func(c *Config) *time.Duration { return &c.OrderedWindow }),
	durOpt("ordered-barrier-wait", "after the MySQL server changed (a failover), how long ORDERED waits at most for every node to raise the ORDERED rows it remembers on the new server (with --zk and --mysql)", func(c *Config) *time.Duration { return &c.OrderedBarrierWait }),
	int64Opt("max-step", "largest UNORDERED segment step", func(c *Config) *int64 { return &c.MaxStep }),
	durOpt("segment-duration", "how long one UNORDERED segment should last; the step adapts towards it", func(c *Config) *time.Duration { return &c.SegmentTTL }),
	strOpt("auto-create-biz", "create unknown businesses on first use: auto (standalone only), true, false", func(c *Config) *string { return &c.AutoCreateBiz }),
	intOpt("auto-create-max", "auto-creation stops once the store holds this many businesses (create more with idctl)", func(c *Config) *int { return &c.AutoCreateMax }),
	intOpt("metrics-max-bizs", "per-business metric series for at most this many businesses; the rest share biz=\"_other\"", func(c *Config) *int { return &c.MetricsMaxBizs }),
	intOpt("max-batch", "largest count one request may ask for (1..10000, the segment limit)", func(c *Config) *int { return &c.MaxBatch }),
	intOpt("max-frame-bytes", "largest Thrift frame the server accepts", func(c *Config) *int { return &c.MaxFrameBytes }),
	strOpt("admin-token", "token required by admin RPCs (at least 16 bytes); prefer --admin-token-file. Neither set: generated at first start into data-dir/admin.token (mode 0600), which idctl reads", func(c *Config) *string { return &c.AdminToken }),
	strOpt("admin-token-file", "file holding the admin token", func(c *Config) *string { return &c.AdminTokenFile }),
	strOpt("client-token", "shared token required by NextIDs, ParseID, Clock and ListWorkers (at least 16 bytes; a business with its own tokens needs one of those instead); prefer --client-token-file; empty: none", func(c *Config) *string { return &c.ClientToken }),
	strOpt("client-token-file", "file holding the shared client token", func(c *Config) *string { return &c.ClientTokenFile }),
	strOpt("master-key-file", "file holding the master key (at least 32 bytes) that wraps every business's obfuscation key, so MySQL and ZooKeeper hold no usable key", func(c *Config) *string { return &c.MasterKeyFile }),
	boolOpt("status-public", "serve /status's public summary (state and channel readiness only) without a token, for dashboards; the full page needs the admin token (the client token: node, channels, slot, members)", func(c *Config) *bool { return &c.StatusPublic }),
	intOpt("max-connections", "most RPC connections held at once; more are closed at accept and counted", func(c *Config) *int { return &c.MaxConns }),
	durOpt("conn-idle-timeout", "an RPC connection that completes no request for this long is closed (bytes that never make a whole call do not count)", func(c *Config) *time.Duration { return &c.ConnIdleTimeout }),
	intOpt("max-connections-per-source", "most RPC connections one source address (IPv4 address, IPv6 /64) holds at once; more are closed at accept and counted; 0: a quarter of the effective max_connections", func(c *Config) *int { return &c.MaxConnsPerSource }),
	strOpt("tls-cert", "PEM certificate: serve RPC over TLS (with --tls-key)", func(c *Config) *string { return &c.TLSCert }),
	strOpt("tls-key", "PEM private key of --tls-cert", func(c *Config) *string { return &c.TLSKey }),
	strOpt("tls-client-ca", "PEM CA bundle: require client certificates signed by it (mutual TLS)", func(c *Config) *string { return &c.TLSClientCA }),
	strOpt("audit-file", "JSON-lines file of the audit plugin, one per node (default: data-dir/audit.jsonl); read it with 'idctl audit'", func(c *Config) *string { return &c.AuditFile }),
	durOpt("shutdown-timeout", "how long SIGTERM waits for in-flight calls", func(c *Config) *time.Duration { return &c.ShutdownTimeout }),
	strOpt("log-level", "debug, info, warn or error", func(c *Config) *string { return &c.LogLevel }),
	strOpt("log-format", "json or console", func(c *Config) *string { return &c.LogFormat }),
}

// AuditPath is the audit file: audit_file, else audit.jsonl in data_dir.
func (c Config) AuditPath() string {
	if c.AuditFile != "" {
		return c.AuditFile
	}
	return filepath.Join(c.DataDir, "audit.jsonl")
}

// loadConfig builds the configuration from defaults, the YAML file named by
// --config (or IDGEN_CONFIG), the environment and the flags in args.
//
// --help prints the usage to stdout and returns errHelp; --version prints
// the version and returns errHelp too (both mean: exit 0 now).
func loadConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("idgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile := fs.String("config", getenv("IDGEN_CONFIG"), "YAML configuration file (env IDGEN_CONFIG)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	usage := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprintf(w, "Usage: idgen [flags]\n\nRuns one idgen node. With no --zk and no --mysql it runs standalone (data in --data-dir).\nEvery flag has an IDGEN_* environment twin and a key in the YAML file (--config).\n\nFlags:\n")
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	// The flag package calls Usage for -h and for bad flags alike; print
	// it after Parse instead, to stdout when asked for, else to stderr.
	fs.Usage = func() {}
	setters := map[string]func(string) error{}
	for _, o := range options {
		usage := fmt.Sprintf("%s (env %s, default %q)", o.usage, o.env(), o.get(&cfg))
		record := func(v string) error {
			setters[o.name] = func(string) error { return o.set(&cfg, v) }
			return nil
		}
		if o.isBool {
			fs.BoolFunc(o.name, usage, record) // --flag, --flag=true, --flag=false
		} else {
			fs.Func(o.name, usage, record)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return cfg, errHelp
		}
		usage(stderr)
		return cfg, err
	}
	if *showVersion {
		fmt.Fprintln(stdout, "idgen", version)
		return cfg, errHelp
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q: idgen takes only flags", fs.Args())
	}
	if *configFile != "" {
		raw, err := os.ReadFile(*configFile)
		if err != nil {
			return cfg, fmt.Errorf("config file: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config file %s: %w", *configFile, err)
		}
	}
	for _, o := range options {
		if v := getenv(o.env()); v != "" {
			if err := o.set(&cfg, v); err != nil {
				return cfg, fmt.Errorf("environment %s: %w", o.env(), err)
			}
		}
	}
	for _, o := range options { // flags last, in a stable order
		if set, ok := setters[o.name]; ok {
			if err := set(""); err != nil {
				return cfg, fmt.Errorf("flag --%s: %w", o.name, err)
			}
		}
	}
	if err := cfg.readSecretFiles(secretfile.Read); err != nil {
		return cfg, err
	}
	if cfg.TLSKey != "" {
		// Read again by the transport; checked here like every secret file.
		if _, err := secretfile.Read(cfg.TLSKey); err != nil {
			return cfg, fmt.Errorf("tls_key: %w", err)
		}
	}
	return cfg, cfg.Validate()
}

// readSecretFiles fills each secret from its *_file twin, read with read
// (secretfile.Read: a file other users can read or change is refused with
// the chmod that fixes it, as the master key is). Giving both forms is
// refused: which one wins would be a guess.
func (c *Config) readSecretFiles(read func(string) ([]byte, error)) error {
	for _, s := range []struct {
		name, file string
		val        *string
	}{
		{"admin_token", c.AdminTokenFile, &c.AdminToken},
		{"client_token", c.ClientTokenFile, &c.ClientToken},
		{"mysql", c.MySQLFile, &c.MySQL},
		{"zk_auth", c.ZKAuthFile, &c.ZKAuth},
	} {
		if s.file == "" {
			continue
		}
		if *s.val != "" {
			return fmt.Errorf("%s and %s_file are both set: keep only %s_file (a secret on the command line or in the environment is readable by other users)", s.name, s.name, s.name)
		}
		raw, err := read(s.file)
		if err != nil {
			return fmt.Errorf("%s_file: %w", s.name, err)
		}
		v := strings.TrimSpace(string(raw))
		if v == "" {
			return fmt.Errorf("%s_file %s is empty", s.name, s.file)
		}
		*s.val = v
	}
	return nil
}

// MinTokenBytes is the shortest admin or client token accepted: shorter
// ones can be guessed over the network.
const MinTokenBytes = 16

// errHelp means the command line asked for help or the version, which
// were printed: exit 0 without starting.
var errHelp = errors.New("help requested")

// knownEnv lists the IDGEN_* variables idgen reads (besides IDGEN_CONFIG)
// and those of idctl, which the same shell or unit may export for it
// (IDGEN_ADDR, IDGEN_TLS_CA, ...): not misspelt either.
func knownEnv() map[string]bool {
	m := map[string]bool{"IDGEN_CONFIG": true}
	for _, o := range options {
		m[o.env()] = true
	}
	for _, k := range idctlenv.Names {
		m[k] = true
	}
	return m
}

// unknownEnv returns the IDGEN_* variables of environ that name no setting
// (a misspelt IDGEN_MSYQL would otherwise be ignored without a word).
// IDGEN_TEST_* and IDGEN_MEASURE belong to the test harness.
func unknownEnv(environ []string) []string {
	known := knownEnv()
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "IDGEN_") || known[k] || strings.HasPrefix(k, "IDGEN_TEST_") || k == "IDGEN_MEASURE" {
			continue
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Standalone reports whether the node runs without ZooKeeper and MySQL.
func (c Config) Standalone() bool { return c.ZK == "" && c.MySQL == "" }

// Mode names the configuration: standalone, zk, mysql or zk+mysql.
func (c Config) Mode() string {
	switch {
	case c.ZK != "" && c.MySQL != "":
		return "zk+mysql"
	case c.ZK != "":
		return "zk"
	case c.MySQL != "":
		return "mysql"
	}
	return "standalone"
}

// AutoCreate resolves auto_create_biz.
func (c Config) AutoCreate() bool {
	switch c.AutoCreateBiz {
	case "true":
		return true
	case "false":
		return false
	}
	return c.Standalone()
}

// Validate checks the configuration; messages name the setting.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, a...)...))
	}
	if c.RPCAddr == "" {
		bad("rpc_addr", "must not be empty")
	}
	if c.DataDir == "" && c.MySQL == "" {
		bad("data_dir", "must not be empty without mysql")
	}
	if _, err := time.Parse(time.RFC3339, c.Epoch); err != nil {
		bad("epoch", "want RFC 3339 such as 2020-01-01T00:00:00Z: %v", err)
	}
	if c.IDCBits < 0 || c.NodeBits < 1 || c.IDCBits+c.NodeBits != snowflake.WorkerBits {
		bad("idc_bits/node_bits", "%d + %d must be %d", c.IDCBits, c.NodeBits, snowflake.WorkerBits)
	} else {
		if c.IDC < 0 || c.IDC >= 1<<c.IDCBits {
			bad("idc", "%d out of range 0..%d", c.IDC, 1<<c.IDCBits-1)
		}
		if c.Node < -1 || c.Node >= 1<<c.NodeBits {
			bad("node", "%d out of range -1..%d", c.Node, 1<<c.NodeBits-1)
		}
	}
	if c.MaxBatch < 1 || c.MaxBatch > segment.MaxBatch {
		bad("max_batch", "%d out of range 1..%d (the largest batch every channel can serve; split larger requests)", c.MaxBatch, segment.MaxBatch)
	}
	if c.MaxFrameBytes < 4096 {
		bad("max_frame_bytes", "%d is below 4096", c.MaxFrameBytes)
	}
	if c.MaxStep < 1 || c.MaxStep > segment.MaxStep {
		bad("max_step", "%d out of range 1..%d", c.MaxStep, segment.MaxStep)
	}
	if !c.Standalone() && c.Node != -1 {
		bad("node", "%d is a standalone setting: with --zk or --mysql the worker slot is claimed cluster-wide so no two nodes share it; remove --node (IDGEN_NODE)", c.Node)
	}
	if c.OutageTolerance < 0 {
		bad("outage_tolerance", "%v is negative", c.OutageTolerance)
	}
	switch c.AutoCreateBiz {
	case "auto", "true", "false":
	default:
		bad("auto_create_biz", "want auto, true or false, got %q", c.AutoCreateBiz)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		bad("log_format", "want json or console, got %q", c.LogFormat)
	}
	if c.ZK != "" && c.MySQL == "" && !c.ZKSingleServerUnwitnessed && zkServerCount(c.ZK) == 1 {
		bad("zk", "%q is a single ZooKeeper server and mysql is not set: if that server is ever restored from an older copy (or loses its disk), a node that starts first after it cannot tell, and may take a worker slot another node still issues from (IDs repeat). "+
			"Fix one of: list a ZooKeeper ensemble of three or more servers (its epoch shows a restore); add --mysql, whose database then witnesses ZooKeeper's history; "+
			"or pass --%s to accept the risk (restore that server only with `idctl cluster restore`, with every node stopped)", c.ZK, ZKSingleServerUnwitnessedOpt)
	}
	if c.ZKSessionTimeout < time.Second {
		bad("zk_session_timeout", "%v is below 1s", c.ZKSessionTimeout)
	}
	for _, t := range []struct{ name, v string }{{"admin_token", c.AdminToken}, {"client_token", c.ClientToken}} {
		if t.v != "" && len(t.v) < MinTokenBytes {
			bad(t.name, "is %d bytes, at least %d needed (generate one with: head -c 32 /dev/urandom | base64)", len(t.v), MinTokenBytes)
		}
	}
	if c.AutoCreateMax < 1 {
		bad("auto_create_max", "%d: want at least 1 (to switch auto-creation off, set auto_create_biz: false)", c.AutoCreateMax)
	}
	if c.MetricsMaxBizs < 1 {
		bad("metrics_max_bizs", "%d: want at least 1", c.MetricsMaxBizs)
	}
	if c.MaxConns < 1 {
		bad("max_connections", "%d: want at least 1", c.MaxConns)
	}
	if c.MaxConnsPerSource < 0 {
		bad("max_connections_per_source", "%d: want 0 (a quarter of max_connections) or more", c.MaxConnsPerSource)
	}
	if c.ConnIdleTimeout <= 0 {
		bad("conn_idle_timeout", "must be positive")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls_cert/tls_key", "give both or neither")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		bad("tls_client_ca", "needs tls_cert and tls_key (mutual TLS is TLS first)")
	}
	if c.OrderedBarrierWait <= 0 {
		bad("ordered_barrier_wait", "must be positive (it bounds how long ORDERED pauses after a MySQL failover)")
	}
	if c.OrderedLease < 300*time.Millisecond || c.OrderedLease > time.Minute {
		bad("ordered_lease", "%v: want 300ms..1m (renewed every third of it; it is also the pause of a crashed owner's shards)", c.OrderedLease)
	} else if c.ZK != "" && c.OrderedLease > c.ZKSessionTimeout {
		bad("ordered_lease", "%v must not exceed zk_session_timeout (%v)", c.OrderedLease, c.ZKSessionTimeout)
	}
	if c.OrderedWindow < time.Millisecond || c.OrderedWindow > 10*time.Second {
		bad("ordered_window", "%v: want 1ms..10s", c.OrderedWindow)
	}
	if c.Heartbeat <= 0 {
		bad("heartbeat_interval", "must be positive")
	} else if c.ZK != "" && c.Heartbeat >= c.ZKSessionTimeout {
		bad("heartbeat_interval", "%v must be below zk_session_timeout (%v)", c.Heartbeat, c.ZKSessionTimeout)
	}
	return errors.Join(errs...)
}

// ZKSingleServerUnwitnessedOpt is the flag that accepts a single
// ZooKeeper server without --mysql (Config.ZKSingleServerUnwitnessed).
const ZKSingleServerUnwitnessedOpt = "zk-single-server-unwitnessed"

// zkServerCount counts the servers of a --zk connect string (the
// configured entries: a string that lists several is an ensemble to this
// rule, whether or not they are all real servers).
func zkServerCount(zk string) int {
	n := 0
	for _, s := range strings.Split(zk, ",") {
		if strings.TrimSpace(s) != "" {
			n++
		}
	}
	return n
}

// Layout returns the snowflake layout the configuration describes.
func (c Config) Layout() snowflake.Layout {
	epoch, _ := time.Parse(time.RFC3339, c.Epoch)
	return snowflake.Layout{Epoch: epoch.UTC(), IDCBits: c.IDCBits, NodeBits: c.NodeBits}
}
