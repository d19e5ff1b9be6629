package mysqlstore

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/segment"
)

const (
	javaProgram = "testdata/JavaShard.java"
	javaGolden  = "testdata/java_shard_vectors.txt"
)

type vector struct {
	s                 string
	hash              int32
	abs, absMod, mask int
	line              int
	hasSupplementary  bool
}

func parseVectors(t *testing.T, data []byte) []vector {
	t.Helper()
	var vs []vector
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("%s:%d: %d fields, want 5", javaGolden, n, len(f))
		}
		raw, err := hex.DecodeString(f[0])
		if err != nil {
			t.Fatalf("%s:%d: %v", javaGolden, n, err)
		}
		nums := make([]int64, 4)
		for i := range nums {
			if nums[i], err = strconv.ParseInt(f[i+1], 10, 32); err != nil {
				t.Fatalf("%s:%d: field %d: %v", javaGolden, n, i+2, err)
			}
		}
		v := vector{s: string(raw), hash: int32(nums[0]), abs: int(nums[1]), absMod: int(nums[2]), mask: int(nums[3]), line: n}
		for _, r := range v.s {
			if r > 0xffff {
				v.hasSupplementary = true
			}
		}
		vs = append(vs, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestShardMatchesJVMVectors checks JavaHash and Shard against the vectors a
// real JVM printed (the committed golden file; TestShardGoldenIsJVMOutput
// re-runs the JVM when one is installed).
func TestShardMatchesJVMVectors(t *testing.T) {
	data, err := os.ReadFile(javaGolden)
	if err != nil {
		t.Fatal(err)
	}
	vs := parseVectors(t, data)
	if len(vs) < 2000 {
		t.Fatalf("only %d vectors in %s", len(vs), javaGolden)
	}
	var minValue, supplementary, nonASCII, negative, maskDiffers int
	for _, v := range vs {
		if got := JavaHash(v.s); got != v.hash {
			t.Errorf("line %d: JavaHash(%q) = %d, JVM says %d", v.line, v.s, got, v.hash)
		}
		if got := Shard(v.s); got != v.abs {
			t.Errorf("line %d: Shard(%q) = %d, JVM's Math.abs(h) %% 64 = %d", v.line, v.s, got, v.abs)
		}
		if v.abs != v.absMod {
			t.Errorf("line %d: %q: Math.abs(h) %% 64 = %d but Math.abs(h %% 64) = %d", v.line, v.s, v.abs, v.absMod)
		}
		if got := maskShard(v.s); got != v.mask {
			t.Errorf("line %d: maskShard(%q) = %d, JVM's (h & 0x7fffffff) %% 64 = %d", v.line, v.s, got, v.mask)
		}
		if v.hash == math.MinInt32 {
			minValue++
			if v.abs != 0 {
				t.Errorf("line %d: %q hashes to Integer.MIN_VALUE, shard %d, want 0", v.line, v.s, v.abs)
			}
		}
		if v.hasSupplementary {
			supplementary++
		}
		if strings.IndexFunc(v.s, func(r rune) bool { return r > 0x7f }) >= 0 {
			nonASCII++
		}
		if v.hash < 0 {
			negative++
			if v.mask != v.abs {
				maskDiffers++
			}
		}
	}
	// The vectors must cover what the mapping is sensitive to.
	if minValue == 0 || supplementary < 100 || nonASCII < 500 || negative < 500 {
		t.Errorf("vectors cover too little: %d MIN_VALUE, %d with surrogate pairs, %d non-ASCII, %d negative",
			minValue, supplementary, nonASCII, negative)
	}
	t.Logf("%d vectors: %d hash to Integer.MIN_VALUE, %d with surrogate pairs, %d non-ASCII, %d negative hashes (the & 0x7fffffff mapping differs on %d of them)",
		len(vs), minValue, supplementary, nonASCII, negative, maskDiffers)
}

// TestShardGoldenIsJVMOutput runs the Java program on a real JVM
// ($IDGEN_TEST_JAVA or java on PATH) and checks that the golden file is
// exactly what it prints.
func TestShardGoldenIsJVMOutput(t *testing.T) {
	java := os.Getenv("IDGEN_TEST_JAVA")
	if java == "" {
		var err error
		if java, err = exec.LookPath("java"); err != nil {
			t.Skip("no JVM: set IDGEN_TEST_JAVA or put java on PATH; the golden file is checked by TestShardMatchesJVMVectors")
		}
	}
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	prog, err := filepath.Abs(javaProgram)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(java, prog)
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", java, javaProgram, err, stderr.String())
	}
	golden, err := os.ReadFile(javaGolden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, golden) {
		t.Fatalf("the JVM's output differs from %s; regenerate it with: cd testdata && java JavaShard.java > java_shard_vectors.txt", javaGolden)
	}
	// And Go agrees with this very output.
	for _, v := range parseVectors(t, out) {
		if JavaHash(v.s) != v.hash || Shard(v.s) != v.abs {
			t.Fatalf("line %d: Go (%d, %d) != JVM (%d, %d) for %q", v.line, JavaHash(v.s), Shard(v.s), v.hash, v.abs, v.s)
		}
	}
}

func TestShardEdges(t *testing.T) {
	tests := []struct {
		s     string
		hash  int32
		shard int
	}{
		{"", 0, 0},
		{"a", 97, 33},
		{"polygenelubricants", math.MinInt32, 0}, // Math.abs(MIN_VALUE) < 0, but MIN_VALUE % 64 == 0
		{"user:1", -836031422, 62},               // (h & 0x7fffffff) % 64 would be 2
		{"\U0001F600", 1772899, 35},              // U+1F600 = \uD83D\uDE00, two code units
	}
	for _, tc := range tests {
		if got := JavaHash(tc.s); got != tc.hash {
			t.Errorf("JavaHash(%q) = %d, want %d", tc.s, got, tc.hash)
		}
		if got := Shard(tc.s); got != tc.shard {
			t.Errorf("Shard(%q) = %d, want %d", tc.s, got, tc.shard)
		}
	}
	for h := int32(math.MinInt32); h < math.MinInt32+200; h++ {
		if got := segment.ShardOfHash(h); got < 0 || got >= OrderedTables {
			t.Fatalf("shardOfHash(%d) = %d", h, got)
		}
	}
	if mysqldb.OrderedTable(7) != "ordered_07" || mysqldb.OrderedTable(63) != "ordered_63" {
		t.Errorf("table names %s %s", mysqldb.OrderedTable(7), mysqldb.OrderedTable(63))
	}
}

func TestColumnsHoldSegmentLimits(t *testing.T) {
	if segment.MaxSubKeyLen > subKeyColumnBytes || segment.MaxStoredRequestIDLen > requestIDColumnBytes ||
		segment.MaxBizNameLen > 128 || segment.MaxDescriptionLen > 1024 {
		t.Fatal("segment's limits outgrew the MySQL columns: add a migration that widens them")
	}
}
