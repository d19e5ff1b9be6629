package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/idgen/idgen/worker"
)

type h struct{}

func (h) Acquired(s worker.Slot)  { fmt.Println("acquired", s) }
func (h) Extended(int64)          {}
func (h) Fenced(err error)        { fmt.Println("fenced", err) }
func (h) LastUsed() int64         { return 0 }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var ls []worker.Lease
	for i := 0; i < 3; i++ {
		l, err := worker.Register(ctx, worker.Config{Servers: []string{os.Getenv("IDGEN_TEST_ZK")}, Root: "/idgen-demo", Cluster: "demo",
			IDC: i % 2, Host: "127.0.0.1", Port: 8800 + i, PropertiesDir: os.TempDir(), Holder: h{}, Version: "v" + strconv.Itoa(i)})
		if err != nil {
			panic(err)
		}
		ls = append(ls, l)
	}
	d, _ := time.ParseDuration(os.Args[1])
	select { case <-ctx.Done(): case <-time.After(d): }
	for _, l := range ls {
		l.Close(context.Background())
	}
}
