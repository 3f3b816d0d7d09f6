// A Go program with cgo: it calls C's malloc, so it links libc dynamically and preloads reach its
// C side (the static refusal must not touch it).
package main

// #include <stdlib.h>
import "C"

import "fmt"

func main() {
	for i := 0; i < 1000; i++ {
		C.free(C.malloc(C.size_t(64 + i)))
	}
	fmt.Println("ok")
}
