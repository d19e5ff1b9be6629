package segment

// Gate holds ORDERED reservations back while the cluster repairs the store
// after the MySQL server behind the connection changed (a failover): the
// new server may have lost reservations that some node served and still
// remembers, so no node may reserve on it before every node has raised
// the rows it remembers.
//
// The token changes whenever the gate closes (and stays the same when it
// opens again): a number reserved under one token may be answered from
// memory only while Enter still returns that token (package ordered's
// cached reservations), and the barrier reads Remembered only after the
// token changed. Enter is on the hot path of cached answers: keep it cheap.
type Gate interface {
	// Enter returns a token when reservations may run, or an error
	// wrapping ErrUnavailable (retryable) while the gate is closed.
	Enter() (token uint64, err error)
	// Check returns nil when a reservation started with token may still
	// be committed and answered: the gate has not closed since.
	Check(token uint64) error
	// ServerChanges counts the MySQL server changes the gate closed for,
	// apart from its other closes (a ZooKeeper restore, the start). Only a
	// server change can lose writes the store acknowledged (a lossy
	// failover), so a write that must not land on a server that lost
	// others' writes (package ordered's exact write-back) anchors on this
	// count, not on the token: a close for another reason costs it
	// nothing. The count never goes down, moves before the token does for
	// the same change, and may move more than once for one change (seen
	// on a connection, then in the cluster's server record): a holder asks
	// only whether it moved.
	ServerChanges() uint64
}
