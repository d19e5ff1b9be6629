package incarnation

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster/zksession"
)

// Session is what the touches need of the node's ZooKeeper session
// (*zksession.Session). One implementation of the touches serves the
// server and the cluster simulator.
type Session interface {
	Conn() zksession.ZK
	View() zksession.View
	NoteRestore(why string)
}

var _ Session = (*zksession.Session)(nil)

// TouchSession touches the incarnation once on the session (Touch). A
// loss it sees is noted on the session, so every guard of the node
// applies the restore rule now (View.Restores grows), not at the next
// reconnect.
func (c *Checker) TouchSession(ctx context.Context, zs Session) (lost bool, err error) {
	lost, why, err := c.Touch(ctx, zs.Conn())
	if err != nil || !lost {
		return false, err
	}
	zs.NoteRestore("seen by the incarnation touch: " + why)
	return true, nil
}

// AfterClaim is worker.Config.AfterClaim: a touch right after each slot
// claim, before the slot serves. The heartbeat touch alone leaves a
// window: a claim made less than a heartbeat before a copy of ZooKeeper
// is taken, then restored, leaves no trace a new node can see. With this
// touch a copy without the claim is a copy without the bump, whose
// counter is below the database's. An error (the touch failed, or it saw
// a loss: the meta is marked restored, and the claim must be made again
// on it) keeps the slot from serving; the worker claims again.
func (c *Checker) AfterClaim(zs Session) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if !zs.View().Has {
			return fmt.Errorf("the ZooKeeper session is not usable: cannot record the claim in the cluster incarnation")
		}
		lost, err := c.TouchSession(ctx, zs)
		switch {
		case err != nil:
			return fmt.Errorf("touch the cluster incarnation: %w", err)
		case lost:
			return fmt.Errorf("the cluster incarnation shows ZooKeeper lost state right after the claim (%s): claim again after the restore mark", zs.View().RestoreWhy)
		}
		return nil
	}
}

// TouchEvery touches the incarnation every interval while the session is
// usable, until the returned stop is called. The check runs at
// (re)connects only; without touches, a ZooKeeper restored from a copy
// taken after every node's last (re)connect looks current to a new node,
// although the running nodes wrote marks and claims since (the fault
// scenario zk-restore-fresh-first: copy 16 s into the nodes' sessions,
// the fresh node took a slot whose restored mark was older than what its
// holder still issued). With a touch every heartbeat, a copy taken more
// than an interval before the nodes were cut off holds a counter below
// the database's, and the new node sees the restore.
func (c *Checker) TouchEvery(every time.Duration, zs Session, log *zap.Logger) (stop func()) {
	if every <= 0 {
		every = 3 * time.Second // the default heartbeat
	}
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !zs.View().Has {
				continue
			}
			tctx, tcancel := context.WithTimeout(ctx, every)
			_, err := c.TouchSession(tctx, zs) // a loss is noted on the session (logged there, at error)
			tcancel()
			if err != nil {
				log.Debug("touching the cluster incarnation failed; retried at the next heartbeat", zap.Error(err))
			}
		}
	}()
	return func() { cancel(); <-done }
}
