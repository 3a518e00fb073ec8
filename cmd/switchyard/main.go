// Command switchyard is the Switchyard ingress controller: a drop-in
// successor to ingress-nginx's controller and Lua data plane.
//
// Subcommands:
//
//	switchyard [controller] [flags]   control plane + balancer + data plane (default)
//	switchyard balancer [flags]       drop-in mode beside an existing ingress-nginx
//	switchyard quickstart             the no-cluster demo on deploy/quickstart
//	switchyard debug pick [flags]     one balancer pick from a backends payload
//	switchyard debug backends|config  what a running controller holds
package main

import (
	"fmt"
	"io"
	"os"
)

// command is one subcommand: it parses its own flags from args and returns
// the process exit code.
type command func(args []string, stdout, stderr io.Writer) int

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	commands := map[string]command{
		"controller": runController,
		"balancer":   runBalancer,
		"debug":      runDebug,
		"quickstart": runQuickstart,
	}
	if len(args) == 0 || (len(args[0]) > 0 && args[0][0] == '-') {
		return runController(args, stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "switchyard: unknown command %q (want controller, balancer or debug)\n", args[0])
		return 2
	}
	return cmd(args[1:], stdout, stderr)
}

// runDebug dispatches `switchyard debug <what>`.
func runDebug(args []string, stdout, stderr io.Writer) int {
	debug := map[string]command{
		"pick":     runDebugPick,
		"backends": runDebugBackends,
		"config":   runDebugConfig,
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "switchyard debug: want a subcommand: pick, backends or config")
		return 2
	}
	cmd, ok := debug[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "switchyard debug: unknown subcommand %q\n", args[0])
		return 2
	}
	return cmd(args[1:], stdout, stderr)
}
