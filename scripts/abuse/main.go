// Command abuse replays, against one running node, the unauthenticated
// abuse that issue 19 found on a default standalone node: 5,000 NextIDs
// calls with new business names, admin RPCs without a token, 100 /metrics
// requests that are never read, 2,000 idle RPC connections. It prints what
// the node did (docs/security.md, "Measured"). Only for 127.0.0.1:
//
//	go run ./scripts/abuse RPC_ADDR ADMIN_ADDR DATA_DIR PID
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/transport"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

func main() {
	rpc, admin, dataDir := os.Args[1], os.Args[2], os.Args[3]
	c, _ := idgensvc.NewClient("idgen", client.WithHostPorts(rpc), client.WithTransportProtocol(transport.TTHeaderFramed), client.WithRPCTimeout(5*time.Second))
	ctx := context.Background()
	codes := map[string]int{}
	t0 := time.Now()
	for i := range 5000 {
		_, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: fmt.Sprintf("atk%05d", i), Count: 1})
		k := "OK"
		if ie, ok := err.(*idl.IdgenError); ok {
			k = ie.Code.String()
		} else if err != nil {
			k = "other"
		}
		codes[k]++
	}
	fmt.Printf("5000 NextIDs with new names in %v: %v\n", time.Since(t0).Round(time.Millisecond), codes)
	st, _ := os.Stat(dataDir + "/idgen.db")
	fmt.Printf("idgen.db: %d KiB\n", st.Size()/1024)
	resp, err := http.Get("http://" + admin + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("/metrics: %d KiB, %d lines with atk\n", len(b)/1024, strings.Count(string(b), "atk"))
	}
	_, err = c.ListBiz(ctx, &idl.ListBizRequest{})
	fmt.Printf("ListBiz without token: %v\n", err)
	// Spoofed loopback admin: no token.
	_, err = c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "evil"})
	fmt.Printf("CreateBiz without token: %v\n", err)
	// 100 /metrics requests never read.
	rss := func() string {
		b, _ := os.ReadFile("/proc/" + os.Args[4] + "/status")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS") {
				return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
			}
		}
		return "?"
	}
	fmt.Println("RSS before slow scrapes:", rss())
	var conns []net.Conn
	for range 100 {
		cn, err := net.Dial("tcp", admin)
		if err != nil {
			continue
		}
		cn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
		conns = append(conns, cn)
	}
	time.Sleep(5 * time.Second)
	fmt.Println("RSS with 100 unread scrapes:", rss())
	for _, cn := range conns {
		cn.Close()
	}
	// 2000 idle RPC connections.
	held := 0
	var rc []net.Conn
	for range 2000 {
		cn, err := net.Dial("tcp", rpc)
		if err != nil {
			break
		}
		rc = append(rc, cn)
	}
	time.Sleep(2 * time.Second)
	for _, cn := range rc {
		cn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := cn.Read(make([]byte, 1)); err != nil && strings.Contains(err.Error(), "timeout") {
			held++
		}
	}
	fmt.Printf("2000 idle RPC connections: %d held open after 2 s\n", held)
	for _, cn := range rc {
		cn.Close()
	}
}
