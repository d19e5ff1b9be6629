package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/idgen/idgen/client"
)

// A client for a static list of nodes: one ID from the business's default
// channel.
func Example() {
	c, err := client.New(client.Config{Addrs: []string{"127.0.0.1:8888"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	id, err := c.Next(context.Background(), "order")
	if err != nil {
		if again, after := client.Retryable(err); again {
			log.Printf("try again in %v: %v", after, err)
		}
		return
	}
	fmt.Println(id)
}

// Nodes from ZooKeeper, watched: joins and leaves take effect at once. The
// secrets come from files (0600, as the nodes' own): the cluster's
// ZooKeeper credential and the client token.
func ExampleNew_zooKeeper() {
	c, err := client.New(client.Config{
		ZK:         []string{"zk1:2181", "zk2:2181", "zk3:2181"},
		Cluster:    "prod",
		ZKAuthFile: "/etc/idgen/zk.auth",
		TokenFile:  "/etc/idgen/client.token",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println(c.Addrs())
}

// Prefetch: Next is served from a local buffer refilled in the background.
// IDs still in the buffer at Close are gaps.
func ExampleNew_prefetch() {
	c, err := client.New(client.Config{
		Addrs: []string{"127.0.0.1:8888"},
		Prefetch: client.PrefetchConfig{
			Bizs:   []client.PrefetchBiz{{Biz: "im.message", Channel: client.Snowflake}},
			MaxAge: 2 * time.Second, // no prefetched SNOWFLAKE ID older than this
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		id, err := c.Next(context.Background(), "im.message")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(id)
	}
}

// Strictly increasing numbers per (business, sub key). The client sends a
// request_id and keeps it across retries, so a lost reply costs no number.
func ExampleClient_Ordered() {
	c, err := client.New(client.Config{Addrs: []string{"127.0.0.1:8888"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	r, err := c.Ordered(context.Background(), "invoice", "tenant-7", 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.First, r.Last)
}

// Branching on a refusal: errors.Is with the sentinel of its code, or a
// switch on Code, without importing the generated kitex_gen package.
func ExampleCode() {
	c, err := client.New(client.Config{Addrs: []string{"127.0.0.1:8888"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, err = c.Next(context.Background(), "order")
	switch {
	case err == nil:
	case errors.Is(err, client.ErrUnknownBiz):
		log.Print("create the business first: idctl biz create --biz order")
	case errors.Is(err, client.ErrUnauthenticated):
		log.Print("set Config.TokenFile to the file holding the client token")
	case client.Code(err) != 0:
		log.Printf("refused with %v: %v", client.Code(err), err)
	default:
		log.Printf("no answer: %v", err)
	}
}
