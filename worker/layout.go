package worker

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idgen/idgen/cluster"
)

// layout names the znodes of one cluster (DESIGN.md, "ZooKeeper layout"):
//
//	/<root>/<cluster>/meta                      persistent: cluster settings
//	/<root>/<cluster>/idc-<n>/members/m-<seq>   ephemeral sequential: one per node
//	/<root>/<cluster>/idc-<n>/slots/<node>      ephemeral: the claim on a slot
//	/<root>/<cluster>/idc-<n>/last/<node>       persistent: the slot's high-water mark
type layout struct{ root, cluster string }

func (l layout) clusterPath() string       { return cluster.Path(l.root, l.cluster) }
func (l layout) meta() string              { return l.clusterPath() + "/meta" }
func (l layout) idc(n int) string          { return l.clusterPath() + "/idc-" + strconv.Itoa(n) }
func (l layout) members(n int) string      { return l.idc(n) + "/members" }
func (l layout) slots(n int) string        { return l.idc(n) + "/slots" }
func (l layout) lastDir(n int) string      { return l.idc(n) + "/last" }
func (l layout) slot(idc, node int) string { return l.slots(idc) + "/" + strconv.Itoa(node) }
func (l layout) last(idc, node int) string { return l.lastDir(idc) + "/" + strconv.Itoa(node) }

// parseIDC returns n for a child "idc-<n>" of the cluster znode.
func parseIDC(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "idc-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

// memberPrefix is the name prefix of the member znodes.
const memberPrefix = "m-"

// memberData is the JSON of a member znode, what operators read with
// zkCli.sh get.
type memberData struct {
	Host        string `json:"host"`
	Port        int    `json:"port"`
	PID         int    `json:"pid"`
	Version     string `json:"version"`
	StartedAt   string `json:"started_at"` // RFC 3339, UTC
	StartedAtMs int64  `json:"started_at_ms"`
	IDC         int    `json:"idc"`
	Slot        int    `json:"slot"` // the node number held
	Worker      int    `json:"worker"`
	Session     string `json:"session"` // ZooKeeper session id, hex
}

// lastData is the JSON of a last/<node> znode.
type lastData struct {
	// HighWater is the Unix millisecond no ID of the slot exceeds before
	// the next write.
	HighWater   int64  `json:"high_water"`
	HighWaterAt string `json:"high_water_at"` // HighWater, RFC 3339 for people
	// Exact is true when HighWater is the holder's last used millisecond
	// (clean shutdown) rather than a heartbeat's look-ahead.
	Exact bool `json:"exact"`
	// WrittenAtMs is the writer's clock when it sent the write; compared
	// with the znode's mtime (ZooKeeper's clock) it gives the writer's
	// clock offset.
	WrittenAtMs int64  `json:"written_at_ms"`
	Host        string `json:"host"`
	Port        int    `json:"port"`
	PID         int    `json:"pid"`
	Session     string `json:"session"`
	// Token identifies the lease instance that wrote the mark (random per
	// process start), so a lease can recognise its own write after a lost
	// reply or a new session.
	Token string `json:"token,omitempty"`
}

func decodeLast(b []byte) (lastData, error) {
	var d lastData
	if len(b) == 0 {
		return d, nil
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("decode high-water mark %q: %w", truncate(b), err)
	}
	return d, nil
}

func rfc3339(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func sessionHex(id int64) string { return fmt.Sprintf("0x%x", id) }

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// toJSON encodes the znode structs above, indented for zkCli.sh readers.
// They hold only strings, numbers and booleans, so encoding cannot fail.
func toJSON(v any) []byte {
	b, _ := json.MarshalIndent(v, "", "  ")
	return b
}
