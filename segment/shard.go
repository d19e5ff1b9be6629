package segment

// OrderedShards is the number of ORDERED shards: tables ordered_00..63 in
// MySQL, and the unit of ownership in a cluster (package ordered).
const OrderedShards = 64

// JavaHash returns Java's String.hashCode of s read as UTF-8: the 32-bit
// h = 31*h + c over the string's UTF-16 code units, so a code point above
// U+FFFF counts as its two surrogates. s must be valid UTF-8 (invalid bytes
// would be decoded differently by Java; mysqlstore rejects them).
func JavaHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r < 0x10000 {
			h = 31*h + int32(r)
			continue
		}
		r -= 0x10000
		h = 31*h + int32(0xd800+(r>>10))
		h = 31*h + int32(0xdc00+(r&0x3ff))
	}
	return h
}

// Shard returns the ORDERED table index of a sub key: Java's
// Math.abs(subKey.hashCode()) % 64, as in the older Java number service.
//
// Java's Math.abs(Integer.MIN_VALUE) is Integer.MIN_VALUE itself (negative),
// and Java's % keeps the dividend's sign. Because 64 divides 2^31,
// MIN_VALUE % 64 is 0, so the MIN_VALUE case lands in table 0 and the index
// is never negative; Math.abs(h) % 64 and Math.abs(h % 64) agree for every h.
// This is NOT the same as (h & 0x7fffffff) % 64, which differs for almost
// every negative hash. The testdata vectors, printed by a real JVM, pin all
// of this down.
func Shard(subKey string) int {
	return ShardOfHash(JavaHash(subKey))
}

// ShardOfHash is Shard for a hash already computed.
func ShardOfHash(h int32) int {
	// Go's int32 negation wraps like Java's int: -MinInt32 == MinInt32.
	// Go's % truncates toward zero like Java's.
	if h < 0 {
		h = -h
	}
	return int(h % OrderedShards)
}
