package mysqlstore

import (
	"unicode/utf8"

	"github.com/idgen/idgen/segment"
)

// OrderedTables is the number of ORDERED tables, ordered_00 .. ordered_63.
const OrderedTables = segment.OrderedShards

// JavaHash is segment.JavaHash (Java's String.hashCode of s read as UTF-8).
func JavaHash(s string) int32 { return segment.JavaHash(s) }

// Shard is segment.Shard: the ORDERED table of a sub key, Java's
// Math.abs(subKey.hashCode()) % 64 as in the older Java number service.
func Shard(subKey string) int { return segment.Shard(subKey) }

// maskShard is the (h & 0x7fffffff) % 64 mapping that some Java code uses
// instead of Math.abs; CheckShards uses it to tell which mapping misplaced
// rows follow.
func maskShard(subKey string) int {
	return int((JavaHash(subKey) & 0x7fffffff) % OrderedTables)
}

// validSubKey reports whether the sub key can be hashed as Java would.
func validSubKey(s string) bool { return utf8.ValidString(s) }
