package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/idgen/idgen/internal/secretfile"
	"github.com/idgen/idgen/worker"
)

// Config of a Client. The zero value of every field means the documented
// default; exactly one of Addrs and ZK must be set.
type Config struct {
	// Addrs is a static list of nodes, host:port.
	Addrs []string
	// ZK is the ZooKeeper ensemble (host:port,...) to discover the nodes
	// of Cluster from, and to watch for joins and leaves.
	ZK []string
	// Cluster is the cluster name. Default "default".
	Cluster string
	// ZKRoot is the ZooKeeper root of the idgen clusters. Default "/idgen".
	ZKRoot string
	// ZKAuth is a digest credential user:password for an ACL-protected
	// cluster. Default none.
	ZKAuth string
	// ZKAuthFile names a file holding ZKAuth instead (the server's
	// --zk-auth-file), so the credential stays out of the program's
	// configuration. See TokenFile for how it is read.
	ZKAuthFile string
	// ZKSessionTimeout is the ZooKeeper session timeout. Default 10s.
	ZKSessionTimeout time.Duration

	// Token is the client token, when the servers require one.
	Token string
	// TokenFile names a file holding the client token instead (the
	// server's --client-token-file, env IDGEN_CLIENT_TOKEN_FILE), read
	// once, by New: a rotated token takes a new Client. Its surrounding
	// whitespace is trimmed; the file is refused as the server refuses
	// its secret files: empty, or readable or writable by other users
	// (chmod 600; a Kubernetes Secret or systemd credential provisioned
	// by root with the group read bit passes, see internal/secretfile).
	// Setting both Token and TokenFile is refused.
	TokenFile string

	// TLS, when set, speaks TLS to the nodes (servers started with
	// --tls-cert): RootCAs to verify them (nil: the system pool),
	// Certificates for mutual TLS (--tls-client-ca), ServerName when the
	// node's address is not a name or IP its certificate holds (empty: the
	// host of each node's address). The connection then uses Kitex's Go
	// net transport instead of netpoll, which cannot do TLS. Ignored when
	// Dial is set. Default nil: plaintext.
	TLS *tls.Config

	// CallTimeout bounds a call whose context has no deadline, all retries
	// included. Default 3s.
	CallTimeout time.Duration
	// RPCTimeout bounds one attempt. Default 1s.
	RPCTimeout time.Duration
	// ConnectTimeout bounds opening a connection. Default 500ms.
	ConnectTimeout time.Duration
	// MaxAttempts is the retry budget: attempts per call, the first
	// included. Default 6.
	MaxAttempts int
	// MaxIdleConns is the idle connections kept per node. Default 64.
	MaxIdleConns int

	// Prefetch configures local prefetch buffers; none by default.
	Prefetch PrefetchConfig

	// KitexLogs keeps Kitex's process-wide logger as it is. By default New
	// sets it to fatal-only: it writes retry warnings on every failed call.
	KitexLogs bool

	// Dial returns the connection to one node. Default: a Kitex client
	// (TTHeader framing, RPCTimeout, ConnectTimeout, MaxIdleConns). Tests
	// use fakes.
	Dial func(addr string) (Conn, error)
	// Now is the clock used for back-offs. Default time.Now.
	Now func() time.Time
	// Sleep waits d or until ctx ends. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// PrefetchConfig turns on prefetching for some businesses.
type PrefetchConfig struct {
	// Bizs lists the (business, channel) pairs to prefetch. Channel must be
	// Unordered or Snowflake. A Next or NextN of Biz uses the buffer when it
	// names that channel, or names none and this is the first entry of Biz.
	Bizs []PrefetchBiz
	// Window sizes the buffer: about this long of the observed rate is
	// kept, between MinBuffer and MaxBuffer. Default 500ms.
	Window time.Duration
	// MinBuffer and MaxBuffer bound the buffer size in IDs. Defaults 64
	// and 200000. A refill starts when half of the size is left.
	MinBuffer, MaxBuffer int
	// MaxBatch is the largest count of one refill request (the server's
	// max_batch). Default 10000.
	MaxBatch int
	// MaxAge bounds how old a prefetched SNOWFLAKE ID may be when handed
	// out (older ones are dropped: gaps). Default 10s; negative: no bound.
	MaxAge time.Duration
}

// PrefetchBiz is one business and channel to prefetch.
type PrefetchBiz struct {
	Biz     string
	Channel Channel
}

func (cfg *Config) fill() error {
	switch {
	case len(cfg.Addrs) > 0 && len(cfg.ZK) > 0:
		return fmt.Errorf("%w: Config.Addrs and Config.ZK are exclusive: give a static list or a ZooKeeper ensemble", ErrInvalid)
	case len(cfg.Addrs) == 0 && len(cfg.ZK) == 0:
		return fmt.Errorf("%w: Config.Addrs or Config.ZK is required", ErrInvalid)
	}
	for _, a := range cfg.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%w: Config.Addrs: %q is not host:port", ErrInvalid, a)
		}
	}
	if err := cfg.readSecretFiles(); err != nil {
		return err
	}
	if cfg.Cluster == "" {
		cfg.Cluster = worker.DefaultCluster
	}
	if cfg.ZKRoot == "" {
		cfg.ZKRoot = worker.DefaultRoot
	}
	if cfg.ZKSessionTimeout <= 0 {
		cfg.ZKSessionTimeout = worker.DefaultSessionTimeout
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.CallTimeout, 3*time.Second)
	def(&cfg.RPCTimeout, time.Second)
	def(&cfg.ConnectTimeout, 500*time.Millisecond)
	def(&cfg.Prefetch.Window, 500*time.Millisecond)
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 6
	}
	if cfg.MaxIdleConns <= 0 {
		cfg.MaxIdleConns = 64
	}
	p := &cfg.Prefetch
	if p.MinBuffer <= 0 {
		p.MinBuffer = 64
	}
	if p.MaxBuffer <= 0 {
		p.MaxBuffer = 200000
	}
	if p.MaxBatch <= 0 {
		p.MaxBatch = 10000
	}
	if p.MaxBuffer < p.MinBuffer {
		return fmt.Errorf("%w: Prefetch.MaxBuffer %d is below MinBuffer %d", ErrInvalid, p.MaxBuffer, p.MinBuffer)
	}
	if p.MaxAge == 0 {
		p.MaxAge = 10 * time.Second
	}
	for _, b := range p.Bizs {
		if b.Biz == "" {
			return fmt.Errorf("%w: Prefetch.Bizs: empty business name", ErrInvalid)
		}
		if b.Channel != Unordered && b.Channel != Snowflake {
			return fmt.Errorf("%w: Prefetch.Bizs %s: channel %v cannot be prefetched (UNORDERED or SNOWFLAKE only: ORDERED numbers must rise across callers)", ErrInvalid, b.Biz, b.Channel)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TLS != nil && cfg.Dial == nil {
		cfg.Dial = cfg.dialTLS
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	return nil
}

// readSecretFiles fills Token and ZKAuth from their *File twins, read as
// the server reads its secret files (secretfile.Fill).
func (cfg *Config) readSecretFiles() error {
	if err := secretfile.Fill(&cfg.Token, cfg.TokenFile, "Config.Token", "Config.TokenFile"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := secretfile.Fill(&cfg.ZKAuth, cfg.ZKAuthFile, "Config.ZKAuth", "Config.ZKAuthFile"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var quietOnce sync.Once

// quietKitex sets Kitex's process-wide log level to fatal, once.
func quietKitex() { quietOnce.Do(func() { klog.SetLevel(klog.LevelFatal) }) }
