package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idgen/idgen/internal/freeport"
)

// ErrPortBusy is wrapped by a start whose process exited because one of
// the node's ports was taken by another process.
var ErrPortBusy = errors.New("a port of the node is taken by another process")

const (
	// portAttempts bounds the starts of a node that never held its
	// ports: each one after a busy port runs on fresh ports.
	portAttempts = 3
	// listenWait bounds how long a start waits for the process to hold
	// its ports: it binds them first thing, before any store or
	// ZooKeeper work.
	listenWait = 30 * time.Second
	// startLogLines is how much of a node's log a start error carries.
	startLogLines = 15
)

// PidDir is where every process the suite starts writes its pid
// (<name>.pid), so ./build.sh faults can stop what a crashed run left.
var PidDir string

func writePid(name string, pid int) {
	if PidDir != "" {
		_ = os.WriteFile(filepath.Join(PidDir, name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644)
	}
}

func removePid(name string) {
	if PidDir != "" {
		_ = os.Remove(filepath.Join(PidDir, name+".pid"))
	}
}

// Node is one idgen process, restartable with the same command line and
// ports.
type Node struct {
	Name      string
	Bin       string
	Args      []string
	Env       []string
	RPCAddr   string
	AdminAddr string
	LogPath   string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	logOff  int64        // size of the log when the current process started
	held    bool         // the current process holds both ports
	owned   bool         // some process of this node held its ports: they are the node's
	inc     atomic.Int64 // incarnation: 1 for the first start
	stopped atomic.Bool  // SIGSTOPped
}

// NewNode prepares a node on fresh loopback ports (freeport.Pick); args
// are the flags after the addresses.
func NewNode(name, bin, dir string, args, env []string) (*Node, error) {
	n := &Node{Name: name, Bin: bin, Env: env, LogPath: filepath.Join(dir, name+".log")}
	n.Args = append([]string{"--rpc-addr", "", "--admin-addr", "", "--log-format", "console"}, args...)
	if err := n.newPorts(); err != nil {
		return nil, err
	}
	return n, nil
}

// newPorts moves the node to fresh ports (Args[1] and Args[3] are the
// addresses).
func (n *Node) newPorts() error {
	rpc, err := freeport.Pick()
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	admin, err := freeport.Pick()
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	n.RPCAddr = fmt.Sprintf("127.0.0.1:%d", rpc)
	n.AdminAddr = fmt.Sprintf("127.0.0.1:%d", admin)
	n.Args[1], n.Args[3] = n.RPCAddr, n.AdminAddr
	return nil
}

// Inc returns the current incarnation, or -1 while the process is down.
func (n *Node) Inc() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return -1
	}
	select {
	case <-n.done:
		return -1
	default:
	}
	return int(n.inc.Load())
}

// Start starts the process and waits until it has finished starting (its
// store is open and its slot claimed), at most d.
func (n *Node) Start(d time.Duration) error {
	if err := n.StartNoWait(); err != nil {
		return err
	}
	return n.WaitStarted(d)
}

// StartNoWait starts the process and waits until it holds its ports or
// exits, without waiting for the rest of its start.
//
// A process that exits because a port is taken (another process bound it
// between freeport.Pick and the node's own bind) is started again on fresh
// ports, at most portAttempts times, as long as no process of this node
// ever held its ports: a node that never ran has published no address.
// After that, and on every restart, which keeps the node's ports (the
// cluster's registry, its peers and the scenario know the node by them),
// the error wraps ErrPortBusy and carries the log's tail: the scenario
// must not run on without the node. A process that exits for another
// reason (a refusal a scenario may expect) is left to WaitStarted and
// WaitExit.
func (n *Node) StartNoWait() error {
	for attempt := 1; ; attempt++ {
		if err := n.launch(); err != nil {
			return err
		}
		err := n.waitHeld(listenWait)
		if err == nil || !errors.Is(err, ErrPortBusy) {
			return err
		}
		n.mu.Lock()
		retry := !n.owned && attempt < portAttempts
		if retry {
			old := n.RPCAddr + ", " + n.AdminAddr
			if perr := n.newPorts(); perr != nil {
				n.mu.Unlock()
				return errors.Join(err, perr)
			}
			n.note("a port of %s was taken before the node bound it: starting again on %s, %s", old, n.RPCAddr, n.AdminAddr)
		}
		n.mu.Unlock()
		if !retry {
			return err
		}
	}
}

// note appends a line of the suite's to the node's log.
func (n *Node) note(format string, a ...any) {
	if f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		fmt.Fprintf(f, "==== faults: "+format+"\n", a...)
		f.Close()
	}
}

// waitHeld waits up to d until the current process holds both its ports
// (nil), or exits: on a busy port, an error wrapping ErrPortBusy; for any
// other reason, nil (see StartNoWait).
func (n *Node) waitHeld(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if n.holdsPorts() {
			return nil
		}
		if !n.Running() {
			if err := n.exitErr(); errors.Is(err, ErrPortBusy) {
				return err
			}
			return nil
		}
		if time.Now().After(deadline) {
			return n.startErr(fmt.Sprintf("not listening on %s and %s %v after its start", n.RPCAddr, n.AdminAddr, d))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdsPorts reports whether the current process holds both the node's
// ports, and remembers it for the process's life.
func (n *Node) holdsPorts() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.held {
		return true
	}
	if n.cmd == nil {
		return false
	}
	if held, _ := freeport.AddrsHeldBy(n.cmd.Process.Pid, n.RPCAddr, n.AdminAddr); held {
		n.held, n.owned = true, true
	}
	return n.held
}

// exitErr describes the exit of the current process, wrapping ErrPortBusy
// when its log names a taken port (as the server's listen error does:
// "rpc_addr: listen tcp ...: bind: address already in use").
func (n *Node) exitErr() error {
	if strings.Contains(n.startLog(), "address already in use") {
		return fmt.Errorf("%w: %v", ErrPortBusy, n.startErr("exited at start on a busy port"))
	}
	return n.startErr(fmt.Sprintf("exited (code %d)", n.ExitCode()))
}

// startErr is an error about the node's current start with the tail of
// what its process logged.
func (n *Node) startErr(what string) error {
	return fmt.Errorf("%s (%s, %s): %s; log tail (%s):\n%s", n.Name, n.RPCAddr, n.AdminAddr, what, n.LogPath, tail(n.startLog(), startLogLines))
}

// startLog returns what the node's log holds since the current start.
func (n *Node) startLog() string {
	n.mu.Lock()
	off := n.logOff
	n.mu.Unlock()
	f, err := os.Open(n.LogPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err.Error()
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// launch starts the process.
func (n *Node) launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("%s: already running", n.Name)
		}
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	off, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "\n==== faults: start %s incarnation %d on %s, %s at %s\n", n.Name, n.inc.Load()+1, n.RPCAddr, n.AdminAddr, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(n.Bin, n.Args...)
	cmd.Env = append(os.Environ(), n.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Dies with the suite, even if the suite is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	n.inc.Add(1)
	n.stopped.Store(false)
	done := make(chan struct{})
	n.cmd, n.done, n.logOff, n.held = cmd, done, off, false
	writePid("node-"+n.Name, cmd.Process.Pid)
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// Running reports whether the process is alive.
func (n *Node) Running() bool { return n.Inc() >= 0 }

// WaitStarted waits until /readyz no longer reports the node as starting.
func (n *Node) WaitStarted(d time.Duration) error {
	return n.waitReady(d, "", func(st readyz) bool {
		s := st.Channels["unordered"].State
		return s != "" && s != "starting"
	})
}

// WaitSnowflake waits until /readyz?channel=snowflake is 200.
func (n *Node) WaitSnowflake(d time.Duration) error {
	return n.waitReady(d, "?channel=snowflake", nil)
}

type readyz struct {
	Channels map[string]struct {
		State string `json:"state"`
	} `json:"channels"`
}

func (n *Node) waitReady(d time.Duration, q string, cond func(readyz) bool) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !n.Running() {
			return n.exitErr()
		}
		// An answer counts only from the node's own process: whatever took
		// a port the node failed to bind may answer in its place (another
		// idgen did, once: the suite ran a scenario without the node).
		if !n.holdsPorts() {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		code, body, err := n.Do(http.MethodGet, "/readyz"+q)
		if err == nil {
			if cond == nil && code == http.StatusOK {
				return nil
			}
			var st readyz
			if cond != nil && json.Unmarshal([]byte(body), &st) == nil && cond(st) {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s: not ready%s after %v (see %s)", n.Name, q, d, n.LogPath)
}

// Signal sends sig to the process (no-op when it is down).
func (n *Node) Signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
	switch sig {
	case syscall.SIGSTOP:
		n.stopped.Store(true)
	case syscall.SIGCONT:
		n.stopped.Store(false)
	}
}

// Kill sends SIGKILL and waits for the exit.
func (n *Node) Kill() {
	n.Signal(syscall.SIGKILL)
	n.wait(10 * time.Second)
}

// Term sends SIGTERM (clean shutdown: exact mark written) and waits up to
// 20s, then kills.
func (n *Node) Term() {
	n.Signal(syscall.SIGTERM)
	if !n.wait(20 * time.Second) {
		n.Kill()
	}
}

func (n *Node) wait(d time.Duration) bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		removePid("node-" + n.Name)
		return true
	case <-time.After(d):
		return false
	}
}

// Do sends an admin HTTP request.
func (n *Node) Do(method, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.AdminAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// ShiftClock sets the node's clock offset (faultinject builds).
func (n *Node) ShiftClock(ms int64) error {
	code, body, err := n.Do(http.MethodPost, "/debug/clock?offset_ms="+strconv.FormatInt(ms, 10))
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s: /debug/clock: %d %s", n.Name, code, body)
	}
	return nil
}

// LastLogLine returns the last line of the node's log: after an exit, the
// reason the process gave.
func (n *Node) LastLogLine() string {
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Worker returns the worker the node holds (-1: none), through Clock().
func (n *Node) Worker() (int32, string, error) {
	c := &Client{Addr: n.RPCAddr, Timeout: 2 * time.Second}
	defer c.Close()
	ci, err := c.Clock(context.Background())
	if err != nil {
		return -1, "", err
	}
	return ci.Worker, ci.State, nil
}
