// Command testhelper holds small Go helpers for hap-operator's tests.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testhelper <verb> ...")
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "testhelper: unknown verb %q\n", os.Args[1])
	os.Exit(2)
}
