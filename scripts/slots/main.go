// Command slots replays issue 30's slot holding (item 4) against one
// running node and prints what the node did (docs/security.md, "Measured"):
//
//  1. RPC: 1,000 connections from 127.0.0.1, each sending one small
//     NextIDs call every 5 s, for 30 s, while a client from 127.0.0.2 calls
//     every 2 s on a new connection;
//  2. admin: 64 keep-alive clients each asking /healthz every 30 s, for
//     75 s, while a probe asks /healthz on a new connection every 4 s with
//     the 2 s timeout of deploy/kubernetes's liveness probe;
//  3. admin: one connection asking /healthz back to back for 2 s.
//
// Only for loopback (it needs 127.0.0.2, which Linux routes to lo):
//
//	scripts/slots.sh             # builds idgen, starts it, runs this
//	go run ./scripts/slots RPC_ADDR ADMIN_ADDR
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: slots RPC_ADDR ADMIN_ADDR (a node on 127.0.0.1)")
		os.Exit(2)
	}
	rpc, admin := os.Args[1], os.Args[2]
	rpcFlood(rpc, admin)
	adminKeepAlive(admin)
	adminBackToBack(admin)
}

// call is a framed binary NextIDs call for business "s", count 1.
func call() []byte {
	ctx := context.Background()
	buf := thrift.NewTMemoryBuffer()
	p := thrift.NewTBinaryProtocolConf(buf, &thrift.TConfiguration{})
	_ = p.WriteMessageBegin(ctx, "NextIDs", thrift.CALL, 1)
	_ = p.WriteStructBegin(ctx, "NextIDs_args")
	_ = p.WriteFieldBegin(ctx, "req", thrift.STRUCT, 1)
	_ = p.WriteStructBegin(ctx, "NextIDsRequest")
	_ = p.WriteFieldBegin(ctx, "biz", thrift.STRING, 1)
	_ = p.WriteString(ctx, "s")
	_ = p.WriteFieldEnd(ctx)
	_ = p.WriteFieldStop(ctx)
	_ = p.WriteStructEnd(ctx)
	_ = p.WriteFieldEnd(ctx)
	_ = p.WriteFieldStop(ctx)
	_ = p.WriteStructEnd(ctx)
	_ = p.WriteMessageEnd(ctx)
	body := buf.Bytes()
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// roundTrip writes the call and reads one framed answer.
func roundTrip(c net.Conn, frame []byte, br *bufio.Reader) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(frame); err != nil {
		return err
	}
	var n [4]byte
	if _, err := io.ReadFull(br, n[:]); err != nil {
		return err
	}
	_, err := io.CopyN(io.Discard, br, int64(binary.BigEndian.Uint32(n[:])))
	return err
}

func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.Dial("tcp", addr)
}

func rpcFlood(rpc, admin string) {
	frame := call()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened, held atomic.Int64
	for range 1000 {
		c, err := dialFrom("127.0.0.1", rpc)
		if err != nil {
			continue
		}
		opened.Add(1)
		wg.Go(func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				if roundTrip(c, frame, br) != nil {
					return
				}
				select {
				case <-stop:
					held.Add(1)
					return
				case <-time.After(5 * time.Second):
				}
			}
		})
	}
	ok, refused := 0, 0
	t0 := time.Now()
	for time.Since(t0) < 30*time.Second {
		time.Sleep(2 * time.Second)
		c, err := dialFrom("127.0.0.2", rpc)
		if err != nil {
			refused++
			continue
		}
		if roundTrip(c, frame, bufio.NewReader(c)) == nil {
			ok++
		} else {
			refused++
		}
		c.Close()
	}
	close(stop)
	wg.Wait()
	fmt.Printf("rpc: 1000 clients from 127.0.0.1 each calling (%d bytes) every 5 s: %d connected, %d held after 30 s\n", len(frame), opened.Load(), held.Load())
	fmt.Printf("rpc: a client from 127.0.0.2 calling every 2 s meanwhile: %d ok, %d refused\n", ok, refused)
	fmt.Printf("rpc: metrics: %s\n", metrics(admin, "idgen_rpc_connections_max", "idgen_rpc_connections_per_source_max",
		"idgen_rpc_connections_refused_total", "idgen_rpc_connections_source_refused_total"))
}

func adminKeepAlive(admin string) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var kaOK, kaErr atomic.Int64
	var clients []*http.Client
	for range 64 {
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Hour}}
		clients = append(clients, cl)
		wg.Go(func() {
			for {
				if code, err := get(cl, admin); err == nil && code == 200 {
					kaOK.Add(1)
				} else {
					kaErr.Add(1)
				}
				select {
				case <-stop:
					return
				case <-time.After(30 * time.Second):
				}
			}
		})
	}
	time.Sleep(2 * time.Second) // all 64 connected and idle
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	answered, probes := 0, 0
	t0 := time.Now()
	for i := range 19 { // one every 4 s from t0, however long each took
		time.Sleep(time.Until(t0.Add(time.Duration(i) * 4 * time.Second)))
		probes++
		if code, err := get(probe, admin); err == nil && code == 200 {
			answered++
		}
	}
	close(stop)
	wg.Wait()
	for _, cl := range clients {
		cl.CloseIdleConnections()
	}
	fmt.Printf("admin: 64 keep-alive clients asking /healthz every 30 s: probes (new connection, 2 s timeout, every 4 s) answered %d of %d over 75 s\n", answered, probes)
	fmt.Printf("admin: the keep-alive clients' own requests: %d ok, %d failed\n", kaOK.Load(), kaErr.Load())
	fmt.Printf("admin: metrics: %s\n", metrics(admin, "idgen_admin_connections_evicted_total", "idgen_admin_connections_probe_total"))
}

func adminBackToBack(admin string) {
	c, err := net.Dial("tcp", admin)
	if err != nil {
		fmt.Println("admin back to back:", err)
		return
	}
	defer c.Close()
	br := bufio.NewReader(c)
	codes := map[int]int{}
	t0 := time.Now()
	for time.Since(t0) < 2*time.Second {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			break
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			codes[-1]++ // closed by the server
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.Close {
			break
		}
	}
	fmt.Printf("admin: one connection asking /healthz back to back for up to 2 s: answers by status %v (-1: closed) in %v\n", codes, time.Since(t0).Round(time.Millisecond))
}

func get(cl *http.Client, admin string) (int, error) {
	resp, err := cl.Get("http://" + admin + "/healthz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// metrics returns "name=value" for the named unlabelled metrics ("absent"
// for those the node does not export).
func metrics(admin string, names ...string) string {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + admin + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, n := range names {
		v := "absent"
		for line := range strings.Lines(string(b)) {
			if s, ok := strings.CutPrefix(line, n+" "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
					v = strconv.FormatFloat(f, 'f', -1, 64)
				}
			}
		}
		out = append(out, n+"="+v)
	}
	return strings.Join(out, " ")
}
