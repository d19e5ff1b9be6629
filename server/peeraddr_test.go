package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/transmeta"
	"github.com/cloudwego/kitex/transport"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// spoofRIP is a client meta handler that writes the TTHeader "rip" string
// key, as a proxy (or an attacker) would, claiming another address.
type spoofRIP struct{ addr string }

func (s spoofRIP) WriteMeta(ctx context.Context, msg remote.Message) (context.Context, error) {
	msg.TransInfo().PutTransStrInfo(map[string]string{transmeta.HeaderTransRemoteAddr: s.addr})
	return ctx, nil
}

func (s spoofRIP) ReadMeta(ctx context.Context, msg remote.Message) (context.Context, error) {
	return ctx, nil
}

const testAdminToken = "peeraddr-test-admin-token-0123456789"

// TestE2E_PeerAddressIgnoresRIP: a TTHeader request carrying rip=
// 198.51.100.7:31337 is still attributed to the socket's address
// (127.0.0.1): the audit record's caller, which the handler takes from
// rpcinfo's From().Address() like the loopback rule of the admin RPCs, is
// the ground truth. Without peerAddrCodec Kitex's header codec puts the
// claimed address there (seen failing by hand).
func TestE2E_PeerAddressIgnoresRIP(t *testing.T) {
	dir := t.TempDir()
	node := testnode.Start(t, testnode.Options{DataDir: dir, Args: []string{"--admin-token", testAdminToken}})
	ctx := context.Background()
	tok := testAdminToken
	if _, err := node.Client(t).CreateBiz(ctx, &idl.CreateBizRequest{Name: "spoof", Plugins: []string{"audit"}, Token: &tok}); err != nil {
		t.Fatalf("CreateBiz: %v", err)
	}
	const fake = "198.51.100.7:31337"
	c, err := idgensvc.NewClient("idgen", client.WithHostPorts(node.RPCAddr), client.WithRPCTimeout(5*time.Second),
		client.WithTransportProtocol(transport.TTHeaderFramed), client.WithMetaHandler(spoofRIP{addr: fake}))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "spoof", Count: 1}); err != nil {
			t.Fatalf("NextIDs with a spoofed rip: %v", err)
		}
	}
	auditFile := filepath.Join(dir, "audit.jsonl")
	var recs []map[string]any
	testnode.WaitFor(t, 15*time.Second, "3 audit records in "+auditFile, func() bool {
		b, _ := os.ReadFile(auditFile)
		recs = recs[:0]
		for line := range strings.Lines(string(b)) {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) == nil && r["biz"] == "spoof" {
				recs = append(recs, r)
			}
		}
		return len(recs) >= 3
	})
	for _, r := range recs {
		caller, _ := r["caller"].(string)
		if !strings.HasPrefix(caller, "127.0.0.1:") || strings.Contains(caller, "198.51.100.7") {
			t.Errorf("audit caller %q: want the socket's address 127.0.0.1:PORT, not the rip header's %s (record %v)", caller, fake, r)
		}
	}
}
