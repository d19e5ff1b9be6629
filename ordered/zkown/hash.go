package zkown

import (
	"hash/fnv"
	"strconv"
)

// score is the rendezvous weight of addr for shard s.
func score(addr string, s int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(addr))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(s)))
	x := h.Sum64()
	// splitmix64's finalizer: FNV's low bits mix poorly.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// DesiredOwner returns the address among addrs that should own shard s
// once hand-offs have settled (rendezvous hashing: the highest score;
// ties go to the smaller address), "" when addrs is empty. Tests and
// tools use it to tell a settled owner map from one mid-rebalance.
func DesiredOwner(addrs []string, s int) string {
	best, bestScore := "", uint64(0)
	for _, a := range addrs {
		sc := score(a, s)
		if best == "" || sc > bestScore || (sc == bestScore && a < best) {
			best, bestScore = a, sc
		}
	}
	return best
}
