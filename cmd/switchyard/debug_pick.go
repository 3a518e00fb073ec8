package main

import (
	"fmt"
	"io"
)

// runDebugPick performs one balancer pick. Not built yet (balancer issue).
func runDebugPick(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "switchyard debug pick: not implemented yet")
	return 2
}
