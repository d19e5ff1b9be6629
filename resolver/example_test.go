package resolver_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/loadbalance"
	"github.com/cloudwego/kitex/pkg/retry"
	"github.com/cloudwego/kitex/transport"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/resolver"
)

// A plain Kitex client of the idgen service that finds the nodes of the
// cluster "prod" in ZooKeeper, without the idgen client package.
func Example() {
	r, err := resolver.New(resolver.Config{
		ZK:      []string{"zk1:2181", "zk2:2181", "zk3:2181"},
		Cluster: "prod",
		// An ACL-protected cluster (cluster init with ZooKeeper auth):
		// the file holding user:password, the nodes' --zk-auth-file.
		ZKAuthFile: "/etc/idgen/zk.auth",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close() // after the client is done

	cli, err := idgenservice.NewClient("idgen",
		client.WithResolver(r),
		// CacheOptions sets Kitex's balancer refresh to
		// Config.RefreshInterval (default 1s; Kitex's own default is 5s):
		// a node that leaves is out of rotation that long after its member
		// znode goes. Equivalent by hand:
		//   client.WithLoadBalancer(loadbalance.NewWeightedBalancer(),
		//       &lbcache.Options{RefreshInterval: time.Second, Cacheable: true})
		client.WithLoadBalancer(loadbalance.NewWeightedBalancer(), r.CacheOptions()),
		// A crashed node stays listed until its ZooKeeper session expires;
		// retrying a failed call on another node is safe for NextIDs.
		client.WithFailureRetry(retry.NewFailurePolicy()),
		client.WithTransportProtocol(transport.TTHeaderFramed),
		client.WithRPCTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// The client token, when the nodes require one (their
	// --client-token-file): every NextIDs carries it, or is refused with
	// UNAUTHENTICATED.
	raw, err := os.ReadFile("/etc/idgen/client.token")
	if err != nil {
		log.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))
	resp, err := cli.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: "order", Count: 10, Token: &token})
	if err != nil {
		log.Fatal(err)
	}
	for _, rg := range resp.Ranges {
		fmt.Println(rg.First, "..", rg.Last)
	}
}
