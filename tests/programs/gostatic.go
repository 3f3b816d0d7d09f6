// A Go program built with CGO_ENABLED=0: statically linked, no interpreter, its heap the Go
// runtime's (GOGC, GOMEMLIMIT), which no preloaded allocator reaches. Writes its first argument's
// file when it runs: a refusal "before anything runs" leaves none.
package main

import (
	"fmt"
	"os"
)

func main() {
	keep := make([][]byte, 0, 64)
	sum := 0
	for i := 0; i < 4096; i++ {
		b := make([]byte, 64<<10)
		b[0] = byte(i)
		sum += int(b[0]) + len(keep)
		if len(keep) < 64 {
			keep = append(keep, b)
		} else {
			keep[i%64] = b
		}
	}
	if len(os.Args) > 1 {
		_ = os.WriteFile(os.Args[1], []byte("ran\n"), 0o644)
	}
	fmt.Println("ok", len(keep), sum)
}
