package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
)

// StandaloneConfig configures a lease without ZooKeeper. The zero value of
// every field but Meta.CreatedMs and Holder is a documented default.
type StandaloneConfig struct {
	// IDC and Node choose the slot. Node -1 lets the lease choose: the
	// cached slot after a clean shutdown (its exact mark has passed), else,
	// after a crash, the least recently used node of the IDC whose mark has
	// passed, so a crash restart serves at once. A fixed Node waits for its
	// own mark (NotBefore, no sleeping). IDC -1 means "from the properties
	// file, else 0".
	IDC  int
	Node int
	// Meta is the node's snowflake settings. Zero EpochMs and bit split
	// mean the cluster defaults; CreatedMs must be given (the server derives
	// it from its data directory).
	Meta Meta
	// Cluster, App, Host, Port and PropertiesDir name the properties file
	// as in Config; defaults as in Config ("default", "idgen", first IPv4,
	// 8888, "./data").
	Cluster       string
	App           string
	Host          string
	Port          int
	PropertiesDir string
	// HeartbeatInterval, HighWaterMargin and MaxStartWait as in Config.
	HeartbeatInterval time.Duration
	HighWaterMargin   time.Duration
	MaxStartWait      time.Duration
	// Clock, Logger and Holder as in Config; Holder is required.
	Clock  clock.Clock
	Logger *zap.Logger
	Holder Holder
}

func (c StandaloneConfig) withDefaults() StandaloneConfig {
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	if c.App == "" {
		c.App = DefaultApp
	}
	if c.Host == "" {
		c.Host = localIP()
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.PropertiesDir == "" {
		c.PropertiesDir = DefaultPropertiesDir
	}
	c.Meta = c.Meta.withDefaults()
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HighWaterMargin == 0 {
		c.HighWaterMargin = DefaultHighWaterMargin
	}
	if c.MaxStartWait == 0 {
		c.MaxStartWait = DefaultMaxStartWait
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate reports the first invalid field of c (after defaults), naming it.
func (c StandaloneConfig) Validate() error {
	c = c.withDefaults()
	if err := c.Meta.validate("Meta."); err != nil {
		return err
	}
	if c.Meta.CreatedMs == 0 {
		return invalid("Meta.CreatedMs", "is zero: give the time the data directory was created")
	}
	if c.IDC != -1 {
		if err := validateSlotPart("IDC", c.IDC, c.Meta.IDCBits); err != nil {
			return err
		}
	}
	if c.Node != -1 {
		if err := validateSlotPart("Node", c.Node, c.Meta.NodeBits); err != nil {
			return err
		}
	}
	if err := validateName("Cluster", c.Cluster); err != nil {
		return err
	}
	if err := validateFileParts(c.App, c.Host, c.Port); err != nil {
		return err
	}
	switch {
	case c.HeartbeatInterval <= 0:
		return invalid("HeartbeatInterval", "must be positive")
	case c.HighWaterMargin < 0:
		return invalid("HighWaterMargin", "is negative")
	case c.MaxStartWait < 0:
		return invalid("MaxStartWait", "is negative")
	case c.Holder == nil:
		return invalid("Holder", "is nil: the lease needs someone to hand the slot to")
	}
	return nil
}

// StandaloneLease is a worker slot taken from configuration or the
// properties file, for a node without ZooKeeper. Nothing coordinates it
// with other nodes: running two standalone nodes with the same slot
// duplicates IDs. What it does keep is rule 2 and 4 across restarts: it
// waits past the cached high-water mark and keeps that mark ahead of the
// IDs issued.
type StandaloneLease struct {
	cfg   StandaloneConfig
	log   *zap.Logger
	props string

	stop   chan struct{}
	done   chan struct{}
	extend chan struct{} // RequestExtend's poke (buffer 1)
	once   sync.Once
	err    error

	mu     sync.Mutex
	state  State
	slot   Slot
	hw     int64
	marks  map[[2]int]int64 // marks of every slot this node used
	beatAt time.Time
}

var _ Lease = (*StandaloneLease)(nil)

// Standalone takes the configured (or chosen) slot, records a new mark,
// calls Holder.Acquired with NotBefore = the slot's cached mark (the holder
// refuses until the clock passes it; refused here only beyond
// MaxStartWait) and keeps the mark ahead with a heartbeat. The cache is
// found even when the host's address changed since it was written.
func Standalone(cfg StandaloneConfig) (*StandaloneLease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l := &StandaloneLease{
		cfg:    cfg,
		log:    cfg.Logger.With(zap.String("mode", "standalone")),
		props:  propertiesPath(cfg.PropertiesDir, cfg.App, cfg.Port, cfg.Host),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		extend: make(chan struct{}, 1),
		state:  StateNone,
	}
	cached, used, hasCache, err := readAnyProperties(l.props, cfg.App, cfg.Cluster, -1)
	if err != nil {
		// The file holds the only record of the slot's mark: guessing
		// could reissue IDs.
		return nil, fmt.Errorf("%w: %w", ErrNoCachedSlot, err)
	}
	if hasCache && used != l.props {
		l.log.Info("properties file of another address found: using its slot and marks",
			zap.String("found", used), zap.String("expected", l.props))
	}
	l.marks = map[[2]int]int64{}
	if hasCache {
		l.marks = cached.allMarks()
	}
	idc, node := cfg.IDC, cfg.Node
	if idc == -1 {
		idc = 0
		if hasCache {
			idc = cached.IDC
		}
	}
	if node == -1 {
		node = l.chooseNode(cached, hasCache, idc)
	}
	if err := validateSlotPart("IDC", idc, cfg.Meta.IDCBits); err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, l.props)
	}
	if err := validateSlotPart("Node", node, cfg.Meta.NodeBits); err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, l.props)
	}
	s := Slot{IDC: idc, Node: node, Worker: cfg.Meta.Worker(idc, node), NotBefore: l.marks[[2]int{idc, node}]}
	if err := checkWait(cfg.Clock, s, cfg.MaxStartWait); err != nil {
		return nil, err
	}
	if d := time.Duration(s.NotBefore-clock.Millis(cfg.Clock)) * time.Millisecond; d > 0 {
		l.log.Info("SNOWFLAKE waits for the clock to pass the slot's cached high-water mark; other channels serve meanwhile",
			zap.Int("node", node), zap.Int64("not_before_ms", s.NotBefore), zap.Duration("wait", d))
	}
	hw := l.nextMark(s.NotBefore)
	if err := l.write(s, hw); err != nil {
		return nil, err
	}
	s.HighWater = hw
	l.mu.Lock()
	l.state, l.slot, l.hw, l.beatAt = StateRegistered, s, hw, time.Now()
	l.mu.Unlock()
	l.log.Info("worker slot taken (standalone)", slotFields(s, 0)...)
	cfg.Holder.Acquired(s)
	go l.run()
	return l, nil
}

// Meta returns the configured settings.
func (l *StandaloneLease) Meta() Meta { return l.cfg.Meta }

// State returns registered until Close, then none.
func (l *StandaloneLease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Slot returns the slot while registered.
func (l *StandaloneLease) Slot() (Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slot, l.state == StateRegistered
}

// Status returns a snapshot for metrics (never connected to ZooKeeper).
func (l *StandaloneLease) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Status{State: l.state, Slot: l.slot, HasSlot: l.state == StateRegistered, HighWater: l.hw, LastHeartbeat: l.beatAt}
}

// chooseNode picks the node of a lease with Node -1: the cached one after a
// clean shutdown or once its mark has passed; after a crash (cached mark a
// look-ahead still in the future) the least recently used node of idc
// whose mark has passed, never-used nodes first. A standalone node owns
// the whole worker space, so moving costs nothing.
func (l *StandaloneLease) chooseNode(cached properties, hasCache bool, idc int) int {
	if !hasCache {
		return 0
	}
	now := clock.Millis(l.cfg.Clock)
	if cached.IDC == idc && (cached.Exact || cached.HighWater < now) {
		return cached.Node
	}
	best, bestMark := -1, int64(0)
	for n := 0; n < 1<<l.cfg.Meta.NodeBits; n++ {
		m := l.marks[[2]int{idc, n}]
		if m >= now {
			continue
		}
		if best < 0 || m < bestMark {
			best, bestMark = n, m
		}
	}
	if best < 0 {
		return cached.Node // every node's mark is ahead: wait for the cached one
	}
	l.log.Info("restart after a crash: moving to a slot whose mark has passed instead of waiting for the cached one",
		zap.Int("cached_node", cached.Node), zap.Int64("cached_mark_ms", cached.HighWater), zap.Int("node", best))
	return best
}

// RequestExtend writes the next mark now instead of at the next heartbeat.
// It does not block; requests coalesce.
func (l *StandaloneLease) RequestExtend() {
	select {
	case l.extend <- struct{}{}:
	default:
	}
}

// Close stops the heartbeat, fences the holder and writes its exact last
// used millisecond as the cached high-water mark.
func (l *StandaloneLease) Close(ctx context.Context) error {
	l.once.Do(func() {
		close(l.stop)
		<-l.done
		l.mu.Lock()
		s := l.slot
		l.state = StateNone
		l.mu.Unlock()
		l.cfg.Holder.Fenced(fmt.Errorf("%w: shutting down", ErrClosed))
		exact := max(l.cfg.Holder.LastUsed(), s.NotBefore)
		l.err = l.writeExact(s, exact, true)
		l.log.Info("worker lease closed (standalone)", zap.Int("worker", s.Worker), zap.Int64("last_used_ms", exact))
	})
	return l.err
}

// run is the heartbeat: write the look-ahead mark, then extend the holder.
func (l *StandaloneLease) run() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-l.extend:
		}
		l.mu.Lock()
		s := l.slot
		l.mu.Unlock()
		hw := l.nextMark(s.NotBefore)
		if err := l.write(s, hw); err != nil {
			l.log.Error("heartbeat: cannot record the high-water mark; the holder will stall at the previous one", zap.Error(err))
			continue
		}
		l.mu.Lock()
		l.hw, l.beatAt = max(l.hw, hw), time.Now()
		l.mu.Unlock()
		l.cfg.Holder.Extended(hw)
	}
}

func (l *StandaloneLease) nextMark(notBefore int64) int64 {
	ahead := l.cfg.Clock.Now().Add(l.cfg.HeartbeatInterval + l.cfg.HighWaterMargin).UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(ahead, l.hw, notBefore+1)
}

func (l *StandaloneLease) write(s Slot, hw int64) error { return l.writeExact(s, hw, false) }

// writeExact records the slot's mark (exact on a clean shutdown) and the
// marks of the other slots this node used.
func (l *StandaloneLease) writeExact(s Slot, hw int64, exact bool) error {
	l.mu.Lock()
	l.marks[[2]int{s.IDC, s.Node}] = max(l.marks[[2]int{s.IDC, s.Node}], hw)
	if exact {
		l.marks[[2]int{s.IDC, s.Node}] = hw
	}
	marks := make(map[[2]int]int64, len(l.marks))
	for k, v := range l.marks {
		marks[k] = v
	}
	l.mu.Unlock()
	err := writeProperties(l.props, properties{
		Cluster: l.cfg.Cluster, IDC: s.IDC, Node: s.Node, WorkerID: s.Worker, HighWater: hw, Exact: exact, Meta: l.cfg.Meta,
		Marks: marks,
	})
	if err != nil {
		return fmt.Errorf("properties file %s: %w", l.props, err)
	}
	return nil
}
