package worker

import (
	"encoding/json"
	"testing"

	"github.com/go-zookeeper/zk"
)

// raceReader is a MemberReader over a fixed tree whose members directory
// is created between a ChildrenW that found it missing and the ExistsW
// that follows (created is set by the first ExistsW of that directory).
type raceReader struct {
	base, dir, member string
	data              []byte
	created           bool
	childW, existW    chan zk.Event
}

func (r *raceReader) Get(string) ([]byte, *zk.Stat, error) { return r.data, &zk.Stat{}, nil }

func (r *raceReader) ChildrenW(p string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	switch {
	case p == r.base:
		return []string{"idc-0"}, &zk.Stat{}, make(chan zk.Event), nil
	case p == r.dir && r.created:
		return []string{r.member}, &zk.Stat{}, r.childW, nil
	}
	return nil, nil, nil, zk.ErrNoNode
}

func (r *raceReader) ExistsW(p string) (bool, *zk.Stat, <-chan zk.Event, error) {
	if p == r.dir {
		r.created = true // the first node of the IDC registered just now
		// The watch of an existing znode fires on its data or deletion,
		// never on a new child.
		return true, &zk.Stat{}, r.existW, nil
	}
	return false, nil, make(chan zk.Event), nil
}

// TestListMembersDirCreatedWhileListed: a members directory created
// between ListMembers' children read and its existence watch is listed
// again, so the member is found and the watch returned is the one on its
// children. Before, the existence watch of the now existing directory was
// returned, which never fires for a joining member: a resolver started
// while its cluster's first node registered saw no member for good
// (resolver TestKitexClientCallsNodeThroughResolver, once in a CI-like run).
func TestListMembersDirCreatedWhileListed(t *testing.T) {
	data, _ := json.Marshal(memberData{Host: "127.0.0.1", Port: 8888})
	r := &raceReader{base: "/idgen/c", dir: "/idgen/c/idc-0/members", member: memberPrefix + "0000000001", data: data,
		childW: make(chan zk.Event), existW: make(chan zk.Event)}
	ms, watches, err := ListMembers(r, "/idgen", "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Addr() != "127.0.0.1:8888" {
		t.Fatalf("members %+v, want the one at 127.0.0.1:8888", ms)
	}
	var childWatch, existWatch bool
	for _, w := range watches {
		childWatch = childWatch || w == (<-chan zk.Event)(r.childW)
		existWatch = existWatch || w == (<-chan zk.Event)(r.existW)
	}
	if !childWatch || existWatch {
		t.Fatalf("watches: on the members' children %v, the directory's existence %v; want only the children's", childWatch, existWatch)
	}
}
