package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"
)

// createMember creates this node's EPHEMERAL_SEQUENTIAL member znode
// dir/m-<guid>-<seq> and returns its path.
//
// The guid is unique to this call. If the connection drops before the
// create's response arrives, the server may have created the znode anyway;
// without the guid the node could not recognise it and would create a
// second one, leaving an orphan member listed for as long as the session
// lives. So after a lost response the children are searched for the guid
// first (what zk.CreateProtectedEphemeralSequential does, here retried
// until ctx ends rather than three times).
func createMember(ctx context.Context, c ZK, dir string, data []byte, acl []zk.ACL) (string, error) {
	var g [8]byte
	if _, err := rand.Read(g[:]); err != nil {
		return "", fmt.Errorf("member guid: %w", err)
	}
	name := memberPrefix + hex.EncodeToString(g[:]) + "-"
	for {
		p, err := c.Create(dir+"/"+name, data, zk.FlagEphemeralSequential, acl)
		switch {
		case err == nil:
			return p, nil
		case errors.Is(err, zk.ErrSessionExpired):
			// The session is gone, and with it anything it created.
			return "", fmt.Errorf("create member in %s: %w", dir, err)
		case !isConnErr(err):
			return "", fmt.Errorf("create member in %s: %w", dir, err)
		}
		for {
			if err := sleepCtx(ctx, retryPause); err != nil {
				return "", fmt.Errorf("create member in %s: %w", dir, err)
			}
			kids, _, err := c.Children(dir)
			if isConnErr(err) {
				continue
			}
			if err != nil {
				return "", fmt.Errorf("look for member in %s: %w", dir, err)
			}
			for _, k := range kids {
				if strings.HasPrefix(k, name) {
					return dir + "/" + k, nil
				}
			}
			break // never created: create again
		}
	}
}

// memberSeq extracts the sequence of a member znode name (m-<guid>-<seq>).
func memberSeq(name string) string {
	if i := strings.LastIndexByte(name, '-'); i >= 0 {
		return name[i+1:]
	}
	return name
}
