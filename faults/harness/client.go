// Package harness runs the fault suite's processes and load: idgen nodes,
// the ZooKeeper and MariaDB servers ./build.sh faults started, a TCP proxy
// that can partition a node from ZooKeeper, and a load generator that
// records every answer for the checker. Its RPC client is written on the
// plain Apache Thrift library (framed binary), so it depends on the wire
// format only, not on the generated Kitex packages.
package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/idgen/idgen/faults/checker"
)

// Channel values of the IDL.
const (
	ChUnordered int32 = 0
	ChOrdered   int32 = 1
	ChSnowflake int32 = 2
)

// ChannelName maps the IDL's channel values to names.
func ChannelName(v int32) string {
	switch v {
	case ChUnordered:
		return checker.Unordered
	case ChOrdered:
		return checker.Ordered
	case ChSnowflake:
		return checker.Snowflake
	case 3:
		return checker.Ordered // SLOW_ORDERED is served as ORDERED
	}
	return fmt.Sprintf("CHANNEL_%d", v)
}

// Client is a plain Thrift (framed binary) client of one node. Not safe for
// concurrent use; after a transport error it reconnects on the next call.
type Client struct {
	Addr    string
	Timeout time.Duration
	// AdminToken is sent on admin RPCs (CreateBiz): nodes accept them
	// with the admin token only, from any address.
	AdminToken string
	trans      thrift.TTransport
	proto      thrift.TProtocol
	seq        int32
}

// Answer is a NextIDs reply.
type Answer struct {
	Ranges   [][2]int64
	Channel  int32
	Fallback bool
}

// errRefused wraps an IdgenError answer.
type errRefused struct{ r checker.Refusal }

func (e *errRefused) Error() string {
	return fmt.Sprintf("%s: %s", checker.CodeName(e.r.Code), e.r.Message)
}

// AsRefusal returns the IdgenError carried by err, if any.
func AsRefusal(err error) (*checker.Refusal, bool) {
	var e *errRefused
	if errors.As(err, &e) {
		return &e.r, true
	}
	return nil, false
}

func (c *Client) conn() error {
	if c.trans != nil {
		return nil
	}
	to := c.Timeout
	if to == 0 {
		to = 3 * time.Second
	}
	cfg := &thrift.TConfiguration{ConnectTimeout: time.Second, SocketTimeout: to}
	t := thrift.NewTFramedTransportConf(thrift.NewTSocketConf(c.Addr, cfg), cfg)
	if err := t.Open(); err != nil {
		return err
	}
	c.trans, c.proto = t, thrift.NewTBinaryProtocolConf(t, cfg)
	return nil
}

// Close drops the connection.
func (c *Client) Close() {
	if c.trans != nil {
		_ = c.trans.Close()
		c.trans, c.proto = nil, nil
	}
}

// field is one field of a request struct.
type field struct {
	id  int16
	typ thrift.TType
	v   any
}

// call writes method(req) with req's fields and reads the reply: success
// (field 0) is handed to readOK; an IdgenError (field 1) becomes an
// errRefused. Transport and protocol errors close the connection.
func (c *Client) call(ctx context.Context, method string, req []field, readOK func(thrift.TProtocol) error) (err error) {
	if err := c.conn(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if _, ok := AsRefusal(err); !ok {
				c.Close()
			}
		}
	}()
	p := c.proto
	c.seq++
	w := func(e error) {
		if err == nil {
			err = e
		}
	}
	w(p.WriteMessageBegin(ctx, method, thrift.CALL, c.seq))
	w(p.WriteStructBegin(ctx, "args"))
	w(p.WriteFieldBegin(ctx, "req", thrift.STRUCT, 1))
	w(p.WriteStructBegin(ctx, "req"))
	for _, f := range req {
		w(p.WriteFieldBegin(ctx, "f", f.typ, f.id))
		switch v := f.v.(type) {
		case string:
			w(p.WriteString(ctx, v))
		case int32:
			w(p.WriteI32(ctx, v))
		case int64:
			w(p.WriteI64(ctx, v))
		case bool:
			w(p.WriteBool(ctx, v))
		case []int32:
			w(p.WriteListBegin(ctx, thrift.I32, len(v)))
			for _, x := range v {
				w(p.WriteI32(ctx, x))
			}
			w(p.WriteListEnd(ctx))
		}
		w(p.WriteFieldEnd(ctx))
	}
	w(p.WriteFieldStop(ctx))
	w(p.WriteStructEnd(ctx))
	w(p.WriteFieldEnd(ctx))
	w(p.WriteFieldStop(ctx))
	w(p.WriteStructEnd(ctx))
	w(p.WriteMessageEnd(ctx))
	w(p.Flush(ctx))
	if err != nil {
		return err
	}
	name, typ, seq, err := p.ReadMessageBegin(ctx)
	if err != nil {
		return err
	}
	if typ == thrift.EXCEPTION {
		ex := thrift.NewTApplicationException(0, "")
		if err := ex.Read(ctx, p); err != nil {
			return err
		}
		return fmt.Errorf("application exception: %v", ex)
	}
	if name != method || seq != c.seq {
		return fmt.Errorf("reply %q seq %d to %q seq %d", name, seq, method, c.seq)
	}
	var refusal *checker.Refusal
	if _, err := p.ReadStructBegin(ctx); err != nil {
		return err
	}
	for {
		_, ft, id, err := p.ReadFieldBegin(ctx)
		if err != nil {
			return err
		}
		if ft == thrift.STOP {
			break
		}
		switch id {
		case 0:
			if err := readOK(p); err != nil {
				return err
			}
		case 1:
			refusal = &checker.Refusal{}
			if err := readStruct(ctx, p, func(fid int16, ft thrift.TType) (bool, error) {
				var err error
				switch {
				case fid == 1 && ft == thrift.I32:
					refusal.Code, err = p.ReadI32(ctx)
				case fid == 2 && ft == thrift.STRING:
					refusal.Message, err = p.ReadString(ctx)
				case fid == 3 && ft == thrift.BOOL:
					refusal.Retryable, err = p.ReadBool(ctx)
				case fid == 4 && ft == thrift.I64:
					refusal.RetryAfterMs, err = p.ReadI64(ctx)
				default:
					return false, nil
				}
				return true, err
			}); err != nil {
				return err
			}
		default:
			if err := thrift.SkipDefaultDepth(ctx, p, ft); err != nil {
				return err
			}
		}
		if err := p.ReadFieldEnd(ctx); err != nil {
			return err
		}
	}
	if err := p.ReadStructEnd(ctx); err != nil {
		return err
	}
	if err := p.ReadMessageEnd(ctx); err != nil {
		return err
	}
	if refusal != nil {
		return &errRefused{*refusal}
	}
	return nil
}

// readStruct reads a struct, handing each field to f; fields f does not
// take (false) are skipped.
func readStruct(ctx context.Context, p thrift.TProtocol, f func(id int16, ft thrift.TType) (bool, error)) error {
	if _, err := p.ReadStructBegin(ctx); err != nil {
		return err
	}
	for {
		_, ft, id, err := p.ReadFieldBegin(ctx)
		if err != nil {
			return err
		}
		if ft == thrift.STOP {
			break
		}
		took, err := f(id, ft)
		if err != nil {
			return err
		}
		if !took {
			if err := thrift.SkipDefaultDepth(ctx, p, ft); err != nil {
				return err
			}
		}
		if err := p.ReadFieldEnd(ctx); err != nil {
			return err
		}
	}
	return p.ReadStructEnd(ctx)
}

// NextIDs calls NextIDs. A refusal is returned as an error AsRefusal
// recognises.
func (c *Client) NextIDs(ctx context.Context, biz string, channel, count int32, subKey string) (*Answer, error) {
	req := []field{{1, thrift.STRING, biz}, {2, thrift.I32, channel}, {3, thrift.I32, count}}
	if subKey != "" {
		req = append(req, field{4, thrift.STRING, subKey})
	}
	a := &Answer{}
	err := c.call(ctx, "NextIDs", req, func(p thrift.TProtocol) error {
		return readStruct(ctx, p, func(id int16, ft thrift.TType) (bool, error) {
			switch {
			case id == 1 && ft == thrift.LIST:
				_, n, err := p.ReadListBegin(ctx)
				if err != nil {
					return true, err
				}
				for range n {
					var r [2]int64
					if err := readStruct(ctx, p, func(rid int16, ft thrift.TType) (bool, error) {
						if (rid == 1 || rid == 2) && ft == thrift.I64 {
							v, err := p.ReadI64(ctx)
							r[rid-1] = v
							return true, err
						}
						return false, nil
					}); err != nil {
						return true, err
					}
					a.Ranges = append(a.Ranges, r)
				}
				return true, p.ReadListEnd(ctx)
			case id == 2 && ft == thrift.I32:
				v, err := p.ReadI32(ctx)
				a.Channel = v
				return true, err
			case id == 3 && ft == thrift.BOOL:
				v, err := p.ReadBool(ctx)
				a.Fallback = v
				return true, err
			}
			return false, nil
		})
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// CreateBiz creates a business (admin RPC: sends c.AdminToken). It serves
// every built-in channel (CreateBizRequest.channels, field 17): the
// standard callers ask one business on all three, and a business serves
// only the channels it lists.
func (c *Client) CreateBiz(ctx context.Context, name string, channel int32, step int64, fallback bool) error {
	return c.CreateBizChannels(ctx, name, channel, step, fallback, []int32{ChUnordered, ChOrdered, ChSnowflake})
}

// CreateBizChannels is CreateBiz allowing only channels (a node without
// MySQL refuses a business that allows UNORDERED or ORDERED).
func (c *Client) CreateBizChannels(ctx context.Context, name string, channel int32, step int64, fallback bool, channels []int32) error {
	req := []field{{1, thrift.STRING, name}, {2, thrift.I32, channel}, {3, thrift.I64, step}, {6, thrift.BOOL, fallback},
		{17, thrift.LIST, channels}}
	if c.AdminToken != "" {
		req = append(req, field{9, thrift.STRING, c.AdminToken})
	}
	return c.call(ctx, "CreateBiz", req,
		func(p thrift.TProtocol) error { return thrift.SkipDefaultDepth(ctx, p, thrift.STRUCT) })
}

// ClockInfo is a Clock reply.
type ClockInfo struct {
	NowMs  int64
	State  string
	Worker int32
}

// Clock calls Clock.
func (c *Client) Clock(ctx context.Context) (*ClockInfo, error) {
	ci := &ClockInfo{}
	err := c.call(ctx, "Clock", nil, func(p thrift.TProtocol) error {
		return readStruct(ctx, p, func(id int16, ft thrift.TType) (bool, error) {
			var err error
			switch {
			case id == 1 && ft == thrift.I64:
				ci.NowMs, err = p.ReadI64(ctx)
			case id == 2 && ft == thrift.STRING:
				ci.State, err = p.ReadString(ctx)
			case id == 4 && ft == thrift.I32:
				ci.Worker, err = p.ReadI32(ctx)
			default:
				return false, nil
			}
			return true, err
		})
	})
	if err != nil {
		return nil, err
	}
	return ci, nil
}
