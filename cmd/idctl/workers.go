package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idgen/idgen/worker"
)

// cmdWorkers lists the worker assignments of a cluster straight from
// ZooKeeper: one row per running member, with the age of its last
// heartbeat and its clock offset against ZooKeeper's clock.
func cmdWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCmdFlags("workers", "idctl workers --zk HOSTS [--cluster NAME] [--zk-root /idgen] [--zk-auth-file F] [--idc N] [--json] [--watch]",
		"Lists the worker assignments of a cluster straight from ZooKeeper. An ACL-protected\ncluster needs the nodes' digest credential: --zk-auth-file (env IDGEN_ZK_AUTH_FILE)\nor --zk-auth (env IDGEN_ZK_AUTH).\n", stderr)
	servers, cluster, root, auth := addZKFlags(fs)
	fs.deprecated("root", "zk-root") // --zk-root, as everywhere else
	idc := fs.Int("idc", -1, "show only this IDC (-1: all)")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	watch := fs.Bool("watch", false, "redraw on every change until interrupted")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for a ZooKeeper session")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	if strings.TrimSpace(*servers) == "" {
		return fs.usageErr("--zk is required (or set IDGEN_ZK)")
	}
	if *idc < -1 {
		return fs.usageErr("--idc %d: want an IDC number or -1 for all", *idc)
	}
	if *timeout <= 0 {
		return fs.usageErr("--timeout %v: want a positive duration", *timeout)
	}

	zkAuth, err := auth.get()
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	conn, err := worker.DialZK(dctx, strings.Split(*servers, ","), worker.DefaultSessionTimeout, zkAuth, nil)
	if err != nil {
		return err
	}
	defer conn.Close()

	show := func(ws []worker.WorkerInfo) error {
		if *asJSON {
			return printWorkersJSON(stdout, ws)
		}
		return printWorkersTable(stdout, ws)
	}
	if !*watch {
		ws, err := worker.ListWorkers(ctx, conn, *root, *cluster, *idc)
		if err != nil {
			return err
		}
		return show(ws)
	}
	tty := workersIsTTY(stdout)
	err = worker.WatchWorkers(ctx, conn, *root, *cluster, *idc, func(ws []worker.WorkerInfo, err error) {
		if err != nil {
			fmt.Fprintf(stderr, "idctl workers: %v (retrying)\n", err)
			return
		}
		if tty && !*asJSON {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J")
		}
		if !*asJSON {
			fmt.Fprintf(stdout, "cluster %s at %s, %d member(s)\n\n", *cluster, time.Now().Format(time.RFC3339), len(ws))
		}
		if err := show(ws); err != nil {
			fmt.Fprintf(stderr, "idctl workers: %v\n", err)
		}
		if !tty && !*asJSON {
			fmt.Fprintln(stdout)
		}
	})
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // interrupted: the normal end of --watch
	}
	return err
}

func printWorkersTable(w io.Writer, ws []worker.WorkerInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IDC\tNODE\tWORKER\tADDR\tPID\tVERSION\tSTARTED\tHEARTBEAT AGE\tCLOCK OFFSET")
	unclaimed, localAge := false, false
	for _, x := range ws {
		node := strconv.Itoa(x.Node)
		if !x.SlotHeld {
			node += "*"
			unclaimed = true
		}
		age, offset := "-", "-"
		if x.HasHeartbeat {
			age = x.HeartbeatAge.Round(time.Millisecond).String()
			if x.AgeByLocalClock {
				age += "~"
				localAge = true
			}
			offset = signedMillis(x.ClockOffset)
		}
		version := x.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n",
			x.IDC, node, x.Worker, net.JoinHostPort(x.Host, strconv.Itoa(x.Port)), x.PID, version,
			x.StartedAt.UTC().Format(time.RFC3339), age, offset)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ws) == 0 {
		fmt.Fprintln(w, "(no running members)")
	}
	if unclaimed {
		fmt.Fprintln(w, "* the member does not hold its slot claim (re-claiming, or it lost it)")
	}
	if localAge {
		fmt.Fprintln(w, "~ ZooKeeper's time was not readable: age measured with this host's clock")
	}
	return nil
}

// signedMillis formats an offset with its sign, to the millisecond.
func signedMillis(d time.Duration) string {
	d = d.Round(time.Millisecond)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

// workerJSON is the --json shape of a WorkerInfo: durations in
// milliseconds, times in RFC 3339.
type workerJSON struct {
	IDC            int    `json:"idc"`
	Node           int    `json:"node"`
	Worker         int    `json:"worker"`
	Addr           string `json:"addr"`
	Host           string `json:"host"`
	Port           int    `json:"port"`
	PID            int    `json:"pid"`
	Version        string `json:"version"`
	StartedAt      string `json:"started_at"`
	Member         string `json:"member"`
	Session        string `json:"session"`
	SlotHeld       bool   `json:"slot_held"`
	HighWaterMs    int64  `json:"high_water_ms,omitempty"`
	HighWaterExact bool   `json:"high_water_exact,omitempty"`
	HeartbeatAgeMs *int64 `json:"heartbeat_age_ms"`
	ClockOffsetMs  *int64 `json:"clock_offset_ms"`
	AgeLocalClock  bool   `json:"heartbeat_age_by_local_clock,omitempty"`
}

func printWorkersJSON(w io.Writer, ws []worker.WorkerInfo) error {
	out := make([]workerJSON, 0, len(ws))
	for _, x := range ws {
		j := workerJSON{
			IDC: x.IDC, Node: x.Node, Worker: x.Worker,
			Addr: net.JoinHostPort(x.Host, strconv.Itoa(x.Port)), Host: x.Host, Port: x.Port,
			PID: x.PID, Version: x.Version, StartedAt: x.StartedAt.UTC().Format(time.RFC3339Nano),
			Member: x.Member, Session: x.Session, SlotHeld: x.SlotHeld,
			HighWaterMs: x.HighWater, HighWaterExact: x.HighWaterExact, AgeLocalClock: x.AgeByLocalClock,
		}
		if x.HasHeartbeat {
			age, off := x.HeartbeatAge.Milliseconds(), x.ClockOffset.Milliseconds()
			j.HeartbeatAgeMs, j.ClockOffsetMs = &age, &off
		}
		out = append(out, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// workersIsTTY reports whether w is a character device (a terminal), where
// --watch clears the screen instead of appending.
func workersIsTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
