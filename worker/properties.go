package worker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/idgen/idgen/cluster/incarnation"
)

// properties is the local cache of the slot (rule 4 of DESIGN.md), in the
// file <app>:<port>:<ip>.properties. It lets a restart try its own slot
// first and, with or without ZooKeeper, wait past the slot's high-water
// mark. Keys workerId, idc, node, highWater and cluster are the contract;
// epochMs, idcBits, nodeBits and createdMs carry the cluster settings so
// that a degraded start (ZooKeeper down) lays IDs out as the cluster does.
//
// exact=true says highWater is the exact last-used millisecond written by
// a clean shutdown (the slot can be resumed at once); false, that it is a
// look-ahead mark (a crash: the slot's last IDs may reach it). mark.<idc>.<node>
// keys remember the marks of other slots this node used before, so a
// standalone node, which owns the whole worker space, can move to a slot
// whose mark has passed after a crash instead of waiting.
type properties struct {
	Cluster   string
	IDC       int
	Node      int
	WorkerID  int
	HighWater int64
	Exact     bool
	// ZKContactMs is this node's clock when it last sent a mark write that
	// ZooKeeper confirmed (0: never, or a file from an older idgen). The
	// slot's claim lives at least a session timeout after it, which is what
	// a degraded start may rely on.
	ZKContactMs int64
	Meta        Meta             // zero when the file predates these keys
	Marks       map[[2]int]int64 // (idc, node) -> mark of slots used before
	// Incarnation is the node's record of the cluster incarnation (the
	// incarnation.* keys, package cluster/incarnation). The lease never
	// sets it: writeProperties keeps what the file holds, and only
	// IncarnationRecord changes it.
	Incarnation incarnation.Local
	// noSlot: the file holds no slot (no idc, node, workerId or
	// highWater key), only the incarnation: written by the incarnation
	// check of a node that has not held a slot yet. Such a file caches no
	// slot for the lease.
	noSlot bool
	// incarnationErr: the incarnation keys are unreadable (Incarnation is
	// zero then).
	incarnationErr error
}

// propertiesPath names the properties file of (app, port, host) in dir.
func propertiesPath(dir, app string, port int, host string) string {
	return filepath.Join(dir, fmt.Sprintf("%s:%d:%s.properties", app, port, host))
}

// readProperties reads a properties file. A missing file is an error
// matching os.ErrNotExist.
func readProperties(path string) (properties, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return properties{}, err
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return properties{}, fmt.Errorf("%s: line %q is not key=value", path, line)
		}
		kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	var p properties
	var errs []error
	// Unreadable incarnation keys do not make the slot unreadable: only
	// the incarnation check reports them (IncarnationRecord.Load).
	p.Incarnation, p.incarnationErr = incarnation.ParseKeys(kv)
	slotless := true
	for _, k := range []string{"idc", "node", "workerId", "highWater"} {
		if _, ok := kv[k]; ok {
			slotless = false
		}
	}
	if slotless && kv["cluster"] != "" {
		p.Cluster, p.noSlot = kv["cluster"], true
		return p, nil
	}
	num := func(key string, required bool) int64 {
		s, ok := kv[key]
		if !ok {
			if required {
				errs = append(errs, fmt.Errorf("missing %s", key))
			}
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not an integer", key, s))
		}
		return n
	}
	p.Cluster = kv["cluster"]
	p.IDC = int(num("idc", true))
	p.Node = int(num("node", true))
	p.WorkerID = int(num("workerId", true))
	p.HighWater = num("highWater", true)
	p.Meta.EpochMs = num("epochMs", false)
	p.Meta.IDCBits = int(num("idcBits", false))
	p.Meta.NodeBits = int(num("nodeBits", false))
	p.Meta.CreatedMs = num("createdMs", false)
	p.Exact = kv["exact"] == "true"
	p.ZKContactMs = num("zkContactMs", false)
	for k, v := range kv {
		rest, ok := strings.CutPrefix(k, "mark.")
		if !ok {
			continue
		}
		a, b, ok := strings.Cut(rest, ".")
		idc, err1 := strconv.Atoi(a)
		node, err2 := strconv.Atoi(b)
		ms, err3 := strconv.ParseInt(v, 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not mark.<idc>.<node>=<ms>", k, v))
			continue
		}
		if p.Marks == nil {
			p.Marks = map[[2]int]int64{}
		}
		p.Marks[[2]int{idc, node}] = ms
	}
	if p.Cluster == "" {
		errs = append(errs, errors.New("missing cluster"))
	}
	if err := errors.Join(errs...); err != nil {
		return properties{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// encode renders p as a Java-style properties file.
func (p properties) encode() []byte {
	var b bytes.Buffer
	b.WriteString("# idgen worker slot cache, rewritten on every heartbeat; do not edit while idgen runs.\n")
	if p.noSlot {
		fmt.Fprintf(&b, "cluster=%s\n", p.Cluster)
		p.encodeIncarnation(&b)
		return b.Bytes()
	}
	fmt.Fprintf(&b, "# highWater %s\n", rfc3339(p.HighWater))
	fmt.Fprintf(&b, "cluster=%s\n", p.Cluster)
	fmt.Fprintf(&b, "idc=%d\n", p.IDC)
	fmt.Fprintf(&b, "node=%d\n", p.Node)
	fmt.Fprintf(&b, "workerId=%d\n", p.WorkerID)
	fmt.Fprintf(&b, "highWater=%d\n", p.HighWater)
	fmt.Fprintf(&b, "exact=%t\n", p.Exact)
	if p.ZKContactMs != 0 {
		fmt.Fprintf(&b, "zkContactMs=%d\n", p.ZKContactMs)
	}
	keys := make([][2]int, 0, len(p.Marks))
	for k := range p.Marks {
		if k != [2]int{p.IDC, p.Node} {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || (keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1])
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "mark.%d.%d=%d\n", k[0], k[1], p.Marks[k])
	}
	if p.Meta != (Meta{}) {
		fmt.Fprintf(&b, "epochMs=%d\n", p.Meta.EpochMs)
		fmt.Fprintf(&b, "idcBits=%d\n", p.Meta.IDCBits)
		fmt.Fprintf(&b, "nodeBits=%d\n", p.Meta.NodeBits)
		fmt.Fprintf(&b, "createdMs=%d\n", p.Meta.CreatedMs)
	}
	p.encodeIncarnation(&b)
	return b.Bytes()
}

func (p properties) encodeIncarnation(b *bytes.Buffer) {
	for _, kv := range p.Incarnation.Keys() {
		fmt.Fprintf(b, "%s=%s\n", kv[0], kv[1])
	}
}

// readAnyProperties reads the properties file at path or, when it does not
// exist (the host's address or the port changed since it was written: a
// container restarted with the same data dir and a new IP), the properties
// file of the same app and cluster in the same directory with the highest
// mark (and, when idc >= 0, the same IDC). The directory belongs to this
// node, so any such file records this node's own past. found is false when
// there is none.
func readAnyProperties(path, app, cluster string, idc int) (p properties, used string, found bool, err error) {
	p, err = readProperties(path)
	if err == nil && !p.noSlot {
		return p, path, true, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return properties{}, path, false, err
	}
	// Missing, or holding no slot yet (only the incarnation): look for the
	// slot this node cached under another address.
	p = properties{}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), app+":*.properties"))
	for _, m := range matches {
		q, qerr := readProperties(m)
		if qerr != nil || q.noSlot || q.Cluster != cluster || (idc >= 0 && q.IDC != idc) {
			continue
		}
		if !found || q.HighWater > p.HighWater {
			p, used, found = q, m, true
		}
	}
	return p, used, found, nil
}

// allMarks returns every mark p records: the current slot's and the others.
func (p properties) allMarks() map[[2]int]int64 {
	out := make(map[[2]int]int64, len(p.Marks)+1)
	for k, v := range p.Marks {
		out[k] = v
	}
	out[[2]int{p.IDC, p.Node}] = max(out[[2]int{p.IDC, p.Node}], p.HighWater)
	return out
}

// propsLocks serialises the writers of one properties file in this
// process: the lease (slot and mark) and the incarnation check
// (IncarnationRecord), each of which keeps the other's keys.
var propsLocks sync.Map // path -> *sync.Mutex

func lockProps(path string) func() {
	mu, _ := propsLocks.LoadOrStore(path, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// writeProperties replaces the properties file at path atomically,
// keeping the incarnation keys the file holds when p has none.
func writeProperties(path string, p properties) error {
	defer lockProps(path)()
	if p.Incarnation == (incarnation.Local{}) {
		if old, err := readProperties(path); err == nil && old.Cluster == p.Cluster {
			p.Incarnation = old.Incarnation
		}
	}
	return writeFileAtomic(path, p.encode())
}

// IncarnationRecord returns the incarnation.Record kept in the properties
// file of (app, port, host) in dir (the same file as the lease's slot
// cache), for the cluster incarnation check. Load falls back to the
// properties file of the same app and cluster with the newest lineage in
// dir when this address has none (the host's address changed); Save
// writes this address's file, keeping its slot keys, and creates it with
// the cluster and the incarnation alone when the node has held no slot.
func IncarnationRecord(dir, app string, port int, host, cluster string) incarnation.Record {
	if app == "" {
		app = DefaultApp
	}
	return &incarnationRecord{path: propertiesPath(dir, app, port, host), app: app, cluster: cluster}
}

type incarnationRecord struct{ path, app, cluster string }

func (r *incarnationRecord) Load() (incarnation.Local, error) {
	p, err := readProperties(r.path)
	switch {
	case err == nil && p.Cluster != r.cluster:
		// Another cluster's file (the node moved to this cluster with the
		// same directory and address): no record of this cluster. The
		// lease overwrites the file with this cluster's slot as well.
	case err == nil && p.incarnationErr != nil:
		return incarnation.Local{}, fmt.Errorf("%s: %w", r.path, p.incarnationErr)
	case err == nil && p.Incarnation != (incarnation.Local{}):
		return p.Incarnation, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return incarnation.Local{}, err
	}
	var best incarnation.Local
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(r.path), r.app+":*.properties"))
	for _, m := range matches {
		q, qerr := readProperties(m)
		if qerr != nil || q.Cluster != r.cluster || q.Incarnation.ID == "" {
			continue
		}
		if q.Incarnation.Version > best.Version || best.ID == "" {
			best = q.Incarnation
		}
	}
	return best, nil
}

func (r *incarnationRecord) Save(l incarnation.Local) error {
	defer lockProps(r.path)()
	p, err := readProperties(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		p = properties{Cluster: r.cluster, noSlot: true}
	case err != nil:
		return fmt.Errorf("properties file %s: %w (not rewritten: fix or move it)", r.path, err)
	case p.Cluster != r.cluster:
		// Another cluster's file: replaced, as the lease replaces it.
		p = properties{Cluster: r.cluster, noSlot: true}
	}
	p.Incarnation = l
	if err := writeFileAtomic(r.path, p.encode()); err != nil {
		return fmt.Errorf("properties file %s: %w", r.path, err)
	}
	return nil
}

// writeFileAtomic replaces the file at path atomically: a crash leaves
// either the old or the new content, never a torn file. It writes a
// temporary file in the same directory, fsyncs it, renames it over path and
// fsyncs the directory so the rename itself is durable.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	// 0700: the properties file holds the slot's mark; another user who
	// could rewrite it could make this node repeat IDs.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create dir %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("temp file for %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("fsync %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmpName, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// PropertiesMeta returns the cluster settings a node's properties file
// records (for `idctl cluster restore`), checking that it belongs to
// cluster and has them.
func PropertiesMeta(path, cluster string) (Meta, error) {
	p, err := readProperties(path)
	if err != nil {
		return Meta{}, err
	}
	if p.Cluster != cluster {
		return Meta{}, fmt.Errorf("%s belongs to cluster %q, not %q", path, p.Cluster, cluster)
	}
	if p.Meta.CreatedMs == 0 || p.Meta.validate("") != nil {
		return Meta{}, fmt.Errorf("%s has no cluster settings (written by an older idgen): take the file of a node that ran this version", path)
	}
	return p.Meta, nil
}

// PropertiesIncarnation returns the cluster incarnation a node's
// properties file records (for `idctl cluster restore`), checking that it
// belongs to cluster; the zero Local when it records none.
func PropertiesIncarnation(path, cluster string) (incarnation.Local, error) {
	p, err := readProperties(path)
	if err != nil {
		return incarnation.Local{}, err
	}
	if p.Cluster != cluster {
		return incarnation.Local{}, fmt.Errorf("%s belongs to cluster %q, not %q", path, p.Cluster, cluster)
	}
	if p.incarnationErr != nil {
		return incarnation.Local{}, fmt.Errorf("%s: %w", path, p.incarnationErr)
	}
	return p.Incarnation, nil
}
