package worker

import "errors"

// Errors of the worker package. Returned errors wrap one of these (check
// with errors.Is) and add the figures that explain them.
var (
	// ErrInvalidConfig: a Config or StandaloneConfig field is invalid; the
	// message names the field.
	ErrInvalidConfig = errors.New("invalid worker config")
	// ErrMetaMismatch: this node's cluster settings differ from those stored
	// in ZooKeeper; the message names the setting and both values.
	ErrMetaMismatch = errors.New("cluster settings differ from ZooKeeper")
	// ErrNoFreeSlot: every worker slot of the IDC is held by a live node.
	ErrNoFreeSlot = errors.New("no free worker slot")
	// ErrStartWaitTooLong: the slot's high-water mark is further ahead of
	// the local clock than MaxStartWait.
	ErrStartWaitTooLong = errors.New("high-water mark too far ahead of the clock")
	// ErrClockSkew: the local clock is too far from the peers' median.
	ErrClockSkew = errors.New("clock differs from the peers")
	// ErrNoCluster: ZooKeeper has no record of the cluster and this node
	// was never a member of it (no properties file of the cluster), so it
	// cannot tell a new cluster from one whose ZooKeeper lost its data.
	// The message names `idctl cluster init`.
	ErrNoCluster = errors.New("cluster not created")
	// ErrZKUnavailable: no ZooKeeper session and no usable cached slot.
	ErrZKUnavailable = errors.New("ZooKeeper unavailable")
	// ErrNoCachedSlot: standalone or degraded start found no usable
	// properties file.
	ErrNoCachedSlot = errors.New("no cached worker slot")
	// ErrRegistryMoved: the cluster's record in ZooKeeper says its worker
	// slots are held elsewhere (`idctl cluster migrate` is moving them, or
	// moved them to MySQL). A node refuses to take a slot in ZooKeeper,
	// at start and at every re-claim, and its lease stops until a restart
	// with the cluster's registry.
	ErrRegistryMoved = errors.New("cluster's worker slots are not held in ZooKeeper")

	// ErrAfterClaim: Config.AfterClaim failed after a slot claim (the
	// cluster incarnation touch could not be written, or it saw that
	// ZooKeeper lost state): the claim is released and claimed again.
	ErrAfterClaim = errors.New("the step after a worker slot claim failed")

	// ErrFenced is wrapped by every reason passed to Holder.Fenced.
	ErrFenced = errors.New("worker slot not held")
	// ErrConnectionLost: the ZooKeeper connection was lost for longer than
	// FenceAfter (wraps ErrFenced).
	ErrConnectionLost = fenceErr("ZooKeeper connection lost")
	// ErrSessionExpired: the ZooKeeper session expired, the slot may belong
	// to another node now (wraps ErrFenced).
	ErrSessionExpired = fenceErr("ZooKeeper session expired")
	// ErrSlotTaken: the slot in use is held by another ZooKeeper session
	// (wraps ErrFenced).
	ErrSlotTaken = fenceErr("worker slot held by another node")
	// ErrClosed: the lease was closed (wraps ErrFenced).
	ErrClosed = fenceErr("worker lease closed")
)

// fenceError is a sentinel that also matches ErrFenced.
type fenceError struct{ msg string }

func fenceErr(msg string) error { return &fenceError{msg} }

func (e *fenceError) Error() string        { return e.msg }
func (e *fenceError) Is(target error) bool { return target == ErrFenced }
