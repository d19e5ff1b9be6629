// Package kitextls is the TLS dialer of Kitex clients: netpoll, Kitex's
// default transport, reads the socket itself and cannot do TLS, so a TLS
// client runs on Kitex's Go net transport with this dialer. The public
// client (client.TLSDialer, Config.TLS) and the servers' forwarding of
// ORDERED requests to a shard's owner (ordered/forward) both use it.
package kitextls

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"

	"github.com/cloudwego/gopkg/bufiox"
	"github.com/cloudwego/kitex/pkg/remote"
)

// Dialer returns a Kitex dialer (client.WithDialer) that opens TLS
// connections with tc, for use with Kitex's Go net client transport
// (client.WithTransHandlerFactory(gonet.NewCliTransHandlerFactory())).
// An empty tc.ServerName is the host of the address dialled.
func Dialer(tc *tls.Config) remote.Dialer {
	return tlsDialer{tc: tc}
}

type tlsDialer struct{ tc *tls.Config }

func (d tlsDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	tc := d.tc
	if tc.ServerName == "" {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		tc = tc.Clone()
		tc.ServerName = host
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := (&tls.Dialer{Config: tc}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return newTLSConn(c), nil
}

// tlsConn is a TLS connection as Kitex's Go net transport wants it: its
// byte buffers come from the connection's Reader and Writer (the shape of
// gonet's own client connection, pkg/remote/trans/gonet/conn.go).
type tlsConn struct {
	net.Conn
	r      *bufiox.DefaultReader
	w      *bufiox.DefaultWriter
	closed atomic.Bool
}

func newTLSConn(c net.Conn) *tlsConn {
	return &tlsConn{Conn: c, r: bufiox.NewDefaultReader(c), w: bufiox.NewDefaultWriter(c)}
}

func (c *tlsConn) Reader() *bufiox.DefaultReader { return c.r }
func (c *tlsConn) Writer() *bufiox.DefaultWriter { return c.w }
func (c *tlsConn) Read(b []byte) (int, error)    { return c.r.Read(b) }

func (c *tlsConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	_ = c.r.Release(nil)
	return c.Conn.Close()
}
