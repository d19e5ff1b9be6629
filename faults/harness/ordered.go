package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
)

// The ORDERED scenarios' parts of the harness: businesses with an
// ordered_mode, the shard-owner map (OrderedOwners), callers that can be
// held, and reading a node's log while it runs.

// Ordered modes of a business (CreateBizRequest.ordered_mode).
const (
	ModeGapless = "gapless"
	ModeCached  = "cached"
)

// CreateOrderedBiz creates a business whose default channel is ORDERED,
// with ordered_mode mode (Thrift field 16 of CreateBizRequest; admin RPC:
// sends c.AdminToken).
func (c *Client) CreateOrderedBiz(ctx context.Context, name, mode string) error {
	req := []field{{1, thrift.STRING, name}, {2, thrift.I32, ChOrdered}, {3, thrift.I64, int64(1000)},
		{6, thrift.BOOL, false}, {16, thrift.STRING, mode}}
	if c.AdminToken != "" {
		req = append(req, field{9, thrift.STRING, c.AdminToken})
	}
	return c.call(ctx, "CreateBiz", req,
		func(p thrift.TProtocol) error { return thrift.SkipDefaultDepth(ctx, p, thrift.STRUCT) })
}

// ShardOwner is one entry of an OrderedOwners reply.
type ShardOwner struct {
	Shard int32
	Addr  string // RPC host:port; "" while the shard has no owner
	Epoch int64
}

// OrderedOwners calls OrderedOwners: the shard-to-owner map as the node
// sees it.
func (c *Client) OrderedOwners(ctx context.Context) ([]ShardOwner, error) {
	var out []ShardOwner
	err := c.call(ctx, "OrderedOwners", nil, func(p thrift.TProtocol) error {
		return readStruct(ctx, p, func(id int16, ft thrift.TType) (bool, error) {
			if id != 1 || ft != thrift.LIST {
				return false, nil
			}
			_, n, err := p.ReadListBegin(ctx)
			if err != nil {
				return true, err
			}
			for range n {
				var o ShardOwner
				if err := readStruct(ctx, p, func(fid int16, ft thrift.TType) (bool, error) {
					var err error
					switch {
					case fid == 1 && ft == thrift.I32:
						o.Shard, err = p.ReadI32(ctx)
					case fid == 2 && ft == thrift.STRING:
						o.Addr, err = p.ReadString(ctx)
					case fid == 3 && ft == thrift.I64:
						o.Epoch, err = p.ReadI64(ctx)
					default:
						return false, nil
					}
					return true, err
				}); err != nil {
					return true, err
				}
				out = append(out, o)
			}
			return true, p.ReadListEnd(ctx)
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Owners asks the node for its shard-to-owner map (one short-lived
// connection).
func (n *Node) Owners() ([]ShardOwner, error) {
	c := &Client{Addr: n.RPCAddr, Timeout: 2 * time.Second}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.OrderedOwners(ctx)
}

// Hold pauses the callers that share it between two calls. The zero value
// is not usable: NewHold.
type Hold struct {
	mu      sync.Mutex
	resumed chan struct{} // non-nil while held; closed by Resume
	active  int           // calls in flight
	idle    chan struct{} // closed when the last call in flight ends while held
}

// NewHold returns a hold that is not held.
func NewHold() *Hold { return &Hold{} }

// enter waits while the hold is held, then counts a call in flight; false
// when stop closed first.
func (h *Hold) enter(stop <-chan struct{}) bool {
	for {
		h.mu.Lock()
		if h.resumed == nil {
			h.active++
			h.mu.Unlock()
			return true
		}
		ch := h.resumed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			return false
		}
	}
}

func (h *Hold) leave() {
	h.mu.Lock()
	h.active--
	if h.active == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
	h.mu.Unlock()
}

// Pause holds the callers and waits until none of their calls is in
// flight (a call ends within the load's timeout).
func (h *Hold) Pause() {
	h.mu.Lock()
	if h.resumed == nil {
		h.resumed = make(chan struct{})
	}
	if h.active == 0 {
		h.mu.Unlock()
		return
	}
	if h.idle == nil {
		h.idle = make(chan struct{})
	}
	ch := h.idle
	h.mu.Unlock()
	<-ch
}

// Resume lets the callers go on.
func (h *Hold) Resume() {
	h.mu.Lock()
	if h.resumed != nil {
		close(h.resumed)
		h.resumed = nil
	}
	h.mu.Unlock()
}

// WaitExit waits up to d for the process to exit.
func (n *Node) WaitExit(d time.Duration) bool { return n.wait(d) }

// ExitCode returns the exit code of the process once it has exited, else
// -1.
func (n *Node) ExitCode() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return -1
	}
	select {
	case <-n.done:
		return n.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// LogSize returns the current size of the node's log: an offset for
// WaitLog.
func (n *Node) LogSize() int64 {
	st, err := os.Stat(n.LogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// LogLines returns the lines of the node's log written after offset that
// contain substr.
func (n *Node) LogLines(offset int64, substr string) []string {
	f, err := os.Open(n.LogPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// WaitLog waits up to d for a line containing substr written after
// offset, and returns it.
func (n *Node) WaitLog(offset int64, substr string, d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	for {
		if ls := n.LogLines(offset, substr); len(ls) > 0 {
			return ls[0], nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s: no log line %q within %v (see %s)", n.Name, substr, d, n.LogPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
