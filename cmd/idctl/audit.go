package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idgen/idgen/internal/idctlenv"
	"github.com/idgen/idgen/plugins"
)

const auditAbout = `Reads a node's audit file (the JSON lines the audit plugin writes for the
businesses that enable it, 'idctl biz update --biz X --plugins audit') and
prints the records that match, oldest first. The file is read locally, on the
node or from a copy: each node writes its own (audit_file, default
<data_dir>/audit.jsonl), and reading it needs no RPC, no admin token and
costs the serving node nothing. Ranges are the numbers before obfuscation.
`

// cmdAudit filters an audit file.
func cmdAudit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCmdFlags("audit", "idctl audit [--file F] [--biz NAME] [--since 10m|RFC3339] [--json]", auditAbout, stderr)
	file := fs.String("file", envOr(idctlenv.AuditFile, "./data/audit.jsonl"), "audit file (env IDGEN_AUDIT_FILE)")
	biz := fs.String("biz", "", "only this business (default: all)")
	since := fs.String("since", "", "only records at or after this: a duration back from now (10m, 24h) or an RFC 3339 time")
	asJSON := fs.Bool("json", false, "print the matching records as JSON lines")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	from, err := parseSince(*since, time.Now())
	if err != nil {
		return fs.usageErr("--since: %v", err)
	}
	f, err := os.Open(*file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w (no business with the audit plugin has issued on this node yet, or set --file)", err)
		}
		return err
	}
	defer f.Close()
	return filterAudit(f, *biz, from, *asJSON, stdout, stderr)
}

// parseSince reads --since: "" (no bound), a duration back from now, or an
// RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: want a positive duration", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want a duration such as 10m or a time such as 2026-11-22T10:00:00Z", s)
	}
	return t, nil
}

func filterAudit(r io.Reader, biz string, from time.Time, asJSON bool, stdout, stderr io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "TIME\tBIZ\tCHANNEL\tCOUNT\tRANGES\tCALLER\tSERVED-BY\tWORKER\tERROR")
	}
	bad, n := 0, 0
	for sc.Scan() {
		var rec plugins.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			bad++
			continue
		}
		if biz != "" && rec.Biz != biz || rec.Time.Before(from) {
			continue
		}
		n++
		if asJSON {
			fmt.Fprintf(stdout, "%s\n", sc.Bytes())
			continue
		}
		ch := rec.Channel
		if rec.Served != "" && rec.Served != rec.Channel {
			ch += "->" + rec.Served
		}
		if rec.Fallback {
			ch += " (fallback)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", rec.Time.Format("2006-01-02T15:04:05.000Z07:00"), rec.Biz, ch, rec.Count,
			auditRanges(rec), dash(rec.Caller), dash(rec.ServedBy), rec.Worker, dash(rec.Error))
	}
	if !asJSON {
		_ = tw.Flush()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the audit file: %w", err)
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "idctl: warning: %d lines are not audit records (skipped)\n", bad)
	}
	if n == 0 && !asJSON {
		fmt.Fprintln(stderr, "idctl: no matching records")
	}
	return nil
}

func auditRanges(rec plugins.AuditRecord) string {
	if len(rec.Ranges) == 0 {
		return "-"
	}
	parts := make([]string, len(rec.Ranges))
	for i, r := range rec.Ranges {
		if r[0] == r[1] {
			parts[i] = fmt.Sprint(r[0])
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r[0], r[1])
		}
	}
	s := strings.Join(parts, ",")
	if rec.Truncated {
		s += ",..."
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
