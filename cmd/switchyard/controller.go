package main

import (
	"fmt"
	"io"
)

// runController runs the controller. The flags are parsed and validated; the
// wiring of control plane and data planes lands with the product-binary
// issue, so for now it says so instead of pretending.
func runController(args []string, stdout, stderr io.Writer) int {
	opts, err := parseControllerFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "switchyard controller: %v\n", err)
		return 2
	}
	if opts.Version {
		fmt.Fprintln(stdout, versionString())
		return 0
	}
	fmt.Fprintln(stderr, "switchyard controller: not implemented yet")
	return 2
}

// runBalancer runs the drop-in balancer mode. Not built yet.
func runBalancer(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "switchyard balancer: not implemented yet")
	return 2
}
