package incarnation

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Local is what a node records of the cluster's incarnation, in its
// properties file (worker/properties.go keeps these keys; see Keys).
// The zero value: nothing recorded (a new node, or a file from an older
// idgen).
type Local struct {
	// ID is the incarnation marker's ID this node ran with.
	ID string
	// CreatedMs is the marker's created_ms (kept when a lost marker is
	// re-created).
	CreatedMs int64
	// Node is the name of this node's lineage znode, chosen once and kept,
	// so a node whose address changed keeps its lineage.
	Node string
	// Version and Token: the lineage this node last wrote and confirmed.
	Version int64
	Token   string
	// PendingVersion and PendingToken: the lineage this node is about to
	// write (recorded before the znode write, confirmed after it). A crash
	// between the two leaves ZooKeeper at either the confirmed or the
	// pending lineage: both are accepted.
	PendingVersion int64
	PendingToken   string
	// Counter is the marker's counter after this node's last bump.
	Counter int64
	// Restores is the marker's restore count this node last saw.
	Restores int64
}

// The properties file keys of Local. Files written before these keys
// existed have none of them: the node records its first check.
const (
	keyID        = "incarnation.id"
	keyCreated   = "incarnation.createdMs"
	keyNode      = "incarnation.node"
	keyLineage   = "incarnation.lineage"
	keyPending   = "incarnation.pending"
	keyCounter   = "incarnation.counter"
	keyRestores  = "incarnation.restores"
	keysPrefix   = "incarnation."
	lineageSplit = ":"
)

// IsKey reports whether a properties key belongs to Local.
func IsKey(k string) bool { return strings.HasPrefix(k, keysPrefix) }

// Keys renders l as properties key/value pairs in a fixed order (none for
// the zero Local).
func (l Local) Keys() [][2]string {
	if l == (Local{}) {
		return nil
	}
	kv := [][2]string{{keyID, l.ID}}
	if l.CreatedMs != 0 {
		kv = append(kv, [2]string{keyCreated, strconv.FormatInt(l.CreatedMs, 10)})
	}
	kv = append(kv, [2]string{keyNode, l.Node})
	if l.Version != 0 {
		kv = append(kv, [2]string{keyLineage, strconv.FormatInt(l.Version, 10) + lineageSplit + l.Token})
	}
	if l.PendingVersion != 0 {
		kv = append(kv, [2]string{keyPending, strconv.FormatInt(l.PendingVersion, 10) + lineageSplit + l.PendingToken})
	}
	kv = append(kv, [2]string{keyCounter, strconv.FormatInt(l.Counter, 10)}, [2]string{keyRestores, strconv.FormatInt(l.Restores, 10)})
	return kv
}

// ParseKeys reads a Local from properties key/values (other keys are
// ignored). No incarnation key at all gives the zero Local.
func ParseKeys(kv map[string]string) (Local, error) {
	var l Local
	var errs []error
	num := func(k string) int64 {
		s, ok := kv[k]
		if !ok {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%s=%q is not a non-negative integer", k, s))
		}
		return n
	}
	pair := func(k string) (int64, string) {
		s, ok := kv[k]
		if !ok {
			return 0, ""
		}
		a, b, ok := strings.Cut(s, lineageSplit)
		n, err := strconv.ParseInt(a, 10, 64)
		if !ok || err != nil || n <= 0 || b == "" {
			errs = append(errs, fmt.Errorf("%s=%q is not <version>:<token>", k, s))
			return 0, ""
		}
		return n, b
	}
	l.ID, l.Node = kv[keyID], kv[keyNode]
	l.CreatedMs = num(keyCreated)
	l.Version, l.Token = pair(keyLineage)
	l.PendingVersion, l.PendingToken = pair(keyPending)
	l.Counter, l.Restores = num(keyCounter), num(keyRestores)
	if l != (Local{}) && (l.ID == "" || l.Node == "") {
		errs = append(errs, fmt.Errorf("%s and %s are both required once any incarnation key is set", keyID, keyNode))
	}
	if err := errors.Join(errs...); err != nil {
		return Local{}, err
	}
	return l, nil
}

// Record is a node's durable local record of the incarnation: the
// worker's properties file in a server (worker.IncarnationRecord). Save
// must be durable when it returns (fsync), or the two-phase lineage write
// does not hold.
type Record interface {
	// Load returns what is recorded (the zero Local when nothing is).
	Load() (Local, error)
	// Save replaces the record.
	Save(Local) error
}

// MemRecord is a Record in memory, for tests and the simulator: it
// survives a simulated process restart when the same value is reused.
type MemRecord struct {
	mu sync.Mutex
	l  Local
	// FailSave, when set, is returned by the Save calls it selects (n
	// counts Saves from 1), after which nothing is saved: a crash between
	// two writes.
	FailSave func(n int) error
	saves    int
}

// Load implements Record.
func (r *MemRecord) Load() (Local, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.l, nil
}

// Save implements Record.
func (r *MemRecord) Save(l Local) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.saves++
	if r.FailSave != nil {
		if err := r.FailSave(r.saves); err != nil {
			return err
		}
	}
	r.l = l
	return nil
}

// MemWitness is a Witness in memory (the database's cluster_binding row),
// for tests and the simulator. The zero value is unbound: set st.Bound
// (NewMemWitness) for a bound database.
type MemWitness struct {
	mu      sync.Mutex
	st      WitnessState
	loadErr error
}

// NewMemWitness returns a bound, empty witness.
func NewMemWitness() *MemWitness { return &MemWitness{st: WitnessState{Bound: true}} }

// Load implements Witness.
func (w *MemWitness) Load(context.Context) (WitnessState, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st, w.loadErr
}

// Raise implements Witness: GREATEST, and the ID when none is recorded;
// nothing when unbound.
func (w *MemWitness) Raise(_ context.Context, id string, n int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.st.Bound {
		return nil
	}
	if w.st.ID == "" {
		w.st.ID = id
	}
	w.st.Counter = max(w.st.Counter, n)
	return nil
}

// Set replaces the witness's state (a database restored or failed over
// to an older copy, in the simulator); err, when not nil, is returned by
// every Load until the next Set.
func (w *MemWitness) Set(st WitnessState, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.st, w.loadErr = st, err
}

// State returns the witness's state.
func (w *MemWitness) State() WitnessState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st
}
