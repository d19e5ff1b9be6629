package zksession

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ServerStat is one ZooKeeper server's answer to the srvr four-letter
// word: whether it serves clients now and its last zxid.
type ServerStat struct {
	Server string
	// Serving is true for a leader, follower or standalone server; false
	// while it elects a leader or syncs ("not currently serving requests").
	Serving bool
	// Zxid is the server's last zxid (only when Serving).
	Zxid int64
	// Err is set when the server gave no answer or one that could not be
	// read (srvr not in 4lw.commands.whitelist, for example).
	Err error
}

// ServerStatsFunc asks each server with srvr, waiting at most timeout
// for each.
type ServerStatsFunc func(servers []string, timeout time.Duration) []ServerStat

// SrvrStats is the default ServerStatsFunc: the srvr four-letter word,
// which ZooKeeper 3.5+ allows by default (4lw.commands.whitelist=srvr).
// go-zookeeper's FLWSrvr would do, but it rejects the whole answer when
// the build line's format differs (Debian's does), and the session needs
// only the mode and the zxid.
func SrvrStats(servers []string, timeout time.Duration) []ServerStat {
	out := make([]ServerStat, len(servers))
	done := make(chan struct{}, len(servers))
	for i, s := range servers {
		go func() {
			out[i] = srvr(s, timeout)
			done <- struct{}{}
		}()
	}
	for range servers {
		<-done
	}
	return out
}

func srvr(server string, timeout time.Duration) ServerStat {
	st := ServerStat{Server: server}
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, "2181")
	}
	c, err := net.DialTimeout("tcp", server, timeout)
	if err != nil {
		st.Err = err
		return st
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("srvr")); err != nil {
		st.Err = err
		return st
	}
	b, err := io.ReadAll(io.LimitReader(c, 64<<10))
	if err != nil && len(b) == 0 {
		st.Err = err
		return st
	}
	return parseSrvr(st, string(b))
}

// parseSrvr reads the Mode and Zxid lines of a srvr answer.
func parseSrvr(st ServerStat, answer string) ServerStat {
	if strings.Contains(answer, "not currently serving") {
		return st // electing or syncing: Serving false, no error
	}
	var mode string
	var zxid int64
	haveZxid := false
	sc := bufio.NewScanner(strings.NewReader(answer))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Mode":
			mode = v
		case "Zxid":
			n, err := strconv.ParseInt(v, 0, 64)
			if err == nil {
				zxid, haveZxid = n, true
			}
		}
	}
	switch {
	case (mode == "leader" || mode == "follower" || mode == "standalone" || mode == "observer") && haveZxid:
		st.Serving, st.Zxid = true, zxid
	default:
		st.Err = fmt.Errorf("unreadable srvr answer %q", truncate(answer))
	}
	return st
}

// truncate shortens an unreadable answer for an error message.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
