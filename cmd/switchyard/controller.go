package main

import (
	"fmt"
	"io"
)

// runController runs the controller. Not built yet (issue: the product
// binary); it says so instead of pretending.
func runController(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "switchyard controller: not implemented yet")
	return 2
}

// runBalancer runs the drop-in balancer mode. Not built yet.
func runBalancer(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "switchyard balancer: not implemented yet")
	return 2
}
