// A Go program with cgo to inspect while it pauses (`alloclab inspect`'s tests): Go's own heap (N MiB
// of small objects kept, in the runtime's arenas at 0xc000000000) beside glibc's heap (N MiB of
// C.malloc'ed blocks kept, from C). It says "paused" on stderr, waits for a line on stdin, then prints
// a checksum of both.
//
// argv: [N (32)]
package main

/*
#include <stdlib.h>
#include <string.h>
static char **blocks;
static void cfill(int n) {
	blocks = malloc(n * sizeof *blocks);
	for (int i = 0; i < n; i++) { blocks[i] = malloc(4096); memset(blocks[i], i & 0x7f, 4096); }
}
static long csum(int n) {
	long s = 0;
	for (int i = 0; i < n; i++) s += blocks[i][i % 4096];
	return s;
}
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
)

func main() {
	mib := 32
	if len(os.Args) > 1 {
		mib, _ = strconv.Atoi(os.Args[1])
	}
	objs := make([][]byte, 0, mib*256)
	for i := 0; i < mib*256; i++ {
		b := make([]byte, 4096)
		for j := range b {
			b[j] = byte(i)
		}
		objs = append(objs, b)
	}
	n := C.int(mib * 256)
	C.cfill(n)
	os.Stderr.WriteString("paused\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
	var s int
	for i, b := range objs {
		s += int(b[i%4096])
	}
	fmt.Printf("go: %d\nc: %d\n", s, int(C.csum(n)))
}
