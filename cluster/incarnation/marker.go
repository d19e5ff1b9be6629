package incarnation

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
)

// Marker is the JSON of /<root>/<cluster>/incarnation, readable with
// `zkCli.sh get`.
type Marker struct {
	// ID names this incarnation of the cluster: random, written once by
	// `idctl cluster init` (or by the first node of an upgraded cluster),
	// and re-written unchanged by a node that finds the marker lost. A
	// different ID than a node recorded means the cluster was re-created.
	ID string `json:"id"`
	// CreatedMs is when the incarnation was created (Unix ms, the creator's
	// clock; informational).
	CreatedMs int64  `json:"created_ms"`
	Created   string `json:"created,omitempty"`
	// Counter is bumped by every node at every (re)connect, conditionally
	// on the znode's version, and raised into the witness (MySQL) after.
	// ZooKeeper's counter at or below the witness's means ZooKeeper lost
	// bumps: it went back to an older copy.
	Counter int64 `json:"counter"`
	// Restores counts the losses of state nodes detected; a node whose
	// record is below it learns that another node detected one.
	// RestoredMs and RestoreReason describe the last one.
	Restores      int64  `json:"restores,omitempty"`
	RestoredMs    int64  `json:"restored_ms,omitempty"`
	Restored      string `json:"restored,omitempty"`
	RestoreReason string `json:"restore_reason,omitempty"`
}

// Lineage is the JSON of /<root>/<cluster>/lineage/<node>: written by
// that node only, with a new version and a fresh random token at every
// (re)connect. ZooKeeper holding an older version, or the same version
// with another token, than the node recorded means it lost the node's
// writes.
type Lineage struct {
	Version int64  `json:"version"`
	Token   string `json:"token"`
	// WrittenMs is the writer's clock (informational).
	WrittenMs int64  `json:"written_ms,omitempty"`
	Written   string `json:"written,omitempty"`
}

// MarkerPath returns the incarnation marker's znode.
func MarkerPath(root, name string) string { return cluster.Path(root, name) + "/incarnation" }

// LineageDir returns the parent of the nodes' lineage znodes.
func LineageDir(root, name string) string { return cluster.Path(root, name) + "/lineage" }

// LineagePath returns a node's lineage znode.
func LineagePath(root, name, node string) string { return LineageDir(root, name) + "/" + node }

// newID returns 16 random bytes in hex.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms (Go 1.24+
		// panics itself); keep a unique-enough fallback anyway.
		return fmt.Sprintf("%032x", time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}

func (m Marker) readable() Marker {
	m.Created = rfc3339(m.CreatedMs)
	m.Restored = ""
	if m.RestoredMs != 0 {
		m.Restored = rfc3339(m.RestoredMs)
	}
	return m
}

func rfc3339(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// ReadMarker returns the cluster's incarnation marker and its znode's
// stat; the error matches zk.ErrNoNode when there is none.
func ReadMarker(c Reader, root, name string) (Marker, *zk.Stat, error) {
	p := MarkerPath(root, name)
	b, st, err := c.Get(p)
	if err != nil {
		return Marker{}, nil, fmt.Errorf("read %s: %w", p, err)
	}
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil || m.ID == "" {
		return Marker{}, nil, fmt.Errorf("%w: %s is not an incarnation marker (%q): restore it from a backup or from a node's properties file (key %s)", ErrInvalid, p, truncate(b), keyID)
	}
	return m, st, nil
}

// Create writes a new incarnation marker for the cluster (`idctl cluster
// init`, and the upgrade of a cluster created before markers existed).
// The cluster's znode must exist. An existing marker is returned with an
// error matching zk.ErrNodeExists.
func Create(c ZK, root, name string, acl []zk.ACL, now time.Time) (Marker, error) {
	m := Marker{ID: newID(), CreatedMs: now.UnixMilli()}
	err := createMarker(c, root, name, m, acl)
	if errors.Is(err, zk.ErrNodeExists) {
		got, _, rerr := ReadMarker(c, root, name)
		if rerr != nil {
			return Marker{}, rerr
		}
		return got, err
	}
	if err != nil {
		return Marker{}, err
	}
	return m.readable(), nil
}

// Recreate re-creates a lost marker with the incarnation a node recorded
// (`idctl cluster restore --from-properties`): without it, a node with no
// record that connects first would take the cluster for one created by an
// older idgen and give it a new ID, and every node that ran before would
// then be refused as members of a re-created cluster. An existing marker
// is returned with an error matching zk.ErrNodeExists.
func Recreate(c ZK, root, name string, from Local, acl []zk.ACL) (Marker, error) {
	if from.ID == "" {
		return Marker{}, fmt.Errorf("%w: no incarnation recorded (a properties file from an older idgen)", ErrInvalid)
	}
	m := Marker{ID: from.ID, CreatedMs: from.CreatedMs, Counter: from.Counter, Restores: from.Restores}
	err := createMarker(c, root, name, m, acl)
	if errors.Is(err, zk.ErrNodeExists) {
		got, _, rerr := ReadMarker(c, root, name)
		if rerr != nil {
			return Marker{}, rerr
		}
		return got, err
	}
	if err != nil {
		return Marker{}, err
	}
	return m.readable(), nil
}

func createMarker(c ZK, root, name string, m Marker, acl []zk.ACL) error {
	p := MarkerPath(root, name)
	if _, err := c.Create(p, toJSON(m.readable()), 0, acl); err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

func toJSON(v any) []byte {
	b, _ := json.Marshal(v) // plain structs of strings and integers: cannot fail
	return b
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
