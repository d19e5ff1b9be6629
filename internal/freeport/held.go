package freeport

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HeldBy reports whether process pid listens on TCP port (any local
// address, IPv4 or IPv6), from /proc (Linux).
//
// Why: a server told to listen on a picked port may find it taken and
// exit, and whatever took it may answer in its place: the suite once
// polled another idgen process's /readyz, took a node that had exited on
// "address already in use" for started, and ran the scenario without it.
// An answer on the port counts only once the port is the started
// process's own.
func HeldBy(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue // no IPv6
			}
			return false, err
		}
		for _, ino := range listenInodes(string(b), port) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		if os.IsNotExist(err) {
			return false, nil // the process is gone
		}
		return false, err
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// tcpListen is the state column's value for LISTEN in /proc/net/tcp.
const tcpListen = "0A"

// listenInodes returns the socket inodes of the listening sockets on port
// in the text of /proc/net/tcp or /proc/net/tcp6:
//
//	sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
//	0: 0100007F:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 12345 ...
func listenInodes(text string, port int) []string {
	want := fmt.Sprintf(":%04X", port)
	var out []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != tcpListen || !strings.HasSuffix(f[1], want) {
			continue
		}
		if f[9] != "0" {
			out = append(out, f[9])
		}
	}
	return out
}

// AddrsHeldBy reports whether process pid listens on the port of every
// host:port in addrs (see HeldBy).
func AddrsHeldBy(pid int, addrs ...string) (bool, error) {
	for _, a := range addrs {
		_, ps, err := net.SplitHostPort(a)
		if err != nil {
			return false, err
		}
		port, err := strconv.Atoi(ps)
		if err != nil {
			return false, fmt.Errorf("freeport: port of %q: %w", a, err)
		}
		if held, err := HeldBy(pid, port); err != nil || !held {
			return false, err
		}
	}
	return true, nil
}
