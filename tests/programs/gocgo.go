// A Go program with cgo: it calls C's malloc, so it links libc dynamically and preloads reach its
// C side (the static refusal must not touch it). Its C buffers are filled and summed, and a Go map
// is built beside them, ROUNDS times (its first argument, 1 by default): it prints what both computed.
// Go ends with the exit_group system call, not libc's exit(): no exit handler of a preloaded
// library runs, so what a fingerprint keeps is its last periodic write.
package main

// #include <stdlib.h>
// #include <string.h>
// static unsigned long fill_sum(size_t n, int seed) {
//     unsigned char *p = malloc(n);
//     unsigned long t = 0;
//     if (!p) return 0;
//     memset(p, seed & 0xff, n);
//     for (size_t i = 0; i < n; i += 61) t += p[i];
//     free(p);
//     return t;
// }
import "C"

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	rounds := 1
	if len(os.Args) > 1 {
		rounds, _ = strconv.Atoi(os.Args[1])
	}
	var sum uint64
	words := map[string]int{}
	for r := 0; r < rounds; r++ {
		for i := 0; i < 1000; i++ {
			C.free(C.malloc(C.size_t(64 + i)))
			sum += uint64(C.fill_sum(C.size_t(256+(i+r)*97%65536), C.int(i+r)))
		}
		for i := 0; i < 20000; i++ {
			words[fmt.Sprintf("k%d", (i+r)*7919%1013)]++
		}
	}
	fmt.Println("ok", sum, len(words))
}
