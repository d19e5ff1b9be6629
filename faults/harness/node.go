package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

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
	inc     atomic.Int64 // incarnation: 1 for the first start
	stopped atomic.Bool  // SIGSTOPped
}

// NewNode prepares a node on fresh loopback ports; args are the flags after
// the addresses.
func NewNode(name, bin, dir string, args, env []string) *Node {
	n := &Node{Name: name, Bin: bin, Env: env,
		RPCAddr:   fmt.Sprintf("127.0.0.1:%d", FreePort()),
		AdminAddr: fmt.Sprintf("127.0.0.1:%d", FreePort()),
		LogPath:   filepath.Join(dir, name+".log")}
	n.Args = append([]string{"--rpc-addr", n.RPCAddr, "--admin-addr", n.AdminAddr, "--log-format", "console"}, args...)
	return n
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

// StartNoWait starts the process.
func (n *Node) StartNoWait() error {
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
	fmt.Fprintf(logf, "\n==== faults: start %s incarnation %d at %s\n", n.Name, n.inc.Load()+1, time.Now().UTC().Format(time.RFC3339Nano))
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
	n.cmd, n.done = cmd, done
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
			return fmt.Errorf("%s exited (see %s)", n.Name, n.LogPath)
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
