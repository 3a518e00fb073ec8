// Command switchyard is the Switchyard ingress controller: a drop-in
// successor to ingress-nginx's controller and Lua data plane.
//
// Subcommands:
//
//	switchyard controller [flags]     control plane + balancer + data plane; flags first means controller
//	switchyard balancer [flags]       drop-in mode beside an existing ingress-nginx
//	switchyard quickstart             the no-cluster demo on deploy/quickstart
//	switchyard debug pick [flags]     one balancer pick from a backends payload
//	switchyard debug backends|config  what a running controller holds
//	switchyard version                the version
//	switchyard help [SUBCOMMAND]      the subcommands, or one's usage
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// command is one subcommand: it parses its own flags from args and returns
// the process exit code.
type command func(args []string, stdout, stderr io.Writer) int

// subcommand is a command with its place in `switchyard help`.
type subcommand struct {
	name    string
	summary string
	run     command
	// help writes the usage; nil means the usage the command's own flag
	// set prints for -h (flagSetHelp).
	help func(w io.Writer)
}

func subcommands() []subcommand {
	return []subcommand{
		{name: "controller", summary: "control plane, balancer and data plane (the default when the first argument is a flag)", run: runController, help: printControllerHelp},
		{name: "balancer", summary: "drop-in mode beside an existing ingress-nginx: its /configuration API and the pick socket", run: runBalancer},
		{name: "quickstart", summary: "the no-cluster demo on deploy/quickstart", run: runQuickstart},
		{name: "debug", summary: "pick, backends, config: what a balancer would pick, what a running controller holds", run: runDebug, help: printDebugHelp},
		{name: "version", summary: "print the version", run: runVersion, help: func(w io.Writer) { fmt.Fprintln(w, "Usage: switchyard version") }},
		{name: "help", summary: "list the subcommands, or print one's usage: switchyard help SUBCOMMAND", run: runHelp, help: printCommands},
	}
}

func debugSubcommands() []subcommand {
	return []subcommand{
		{name: "pick", summary: "one balancer pick from an ingress-nginx backends payload", run: runDebugPick},
		{name: "backends", summary: "the balancers of a running controller (ingress-nginx: dbg backends)", run: runDebugBackends},
		{name: "config", summary: "the configuration a running controller serves (ingress-nginx: dbg conf)", run: runDebugConfig},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printCommands(stdout)
		return 0
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return runHelp(args[1:], stdout, stderr)
	case "--version", "-version":
		return runVersion(args[1:], stdout, stderr)
	}
	if strings.HasPrefix(args[0], "-") {
		// ingress-nginx's controller is started with flags alone.
		return runControllerOrHelp(args, stdout, stderr)
	}
	if args[0] == "controller" {
		return runControllerOrHelp(args[1:], stdout, stderr)
	}
	if args[0] == "worker" {
		// A Go data plane worker process, which the controller starts
		// (--go-workers, worker.go); not listed.
		return runWorker(args[1:], stdout, stderr)
	}
	cmd, ok := lookup(subcommands(), args[0])
	if !ok {
		fmt.Fprintf(stderr, "switchyard: unknown subcommand %q\n\n", args[0])
		printCommands(stderr)
		return 2
	}
	if cmd.name != "help" && wantsHelp(args[1:]) {
		return printHelp(cmd, "switchyard "+cmd.name, stdout)
	}
	return cmd.run(args[1:], stdout, stderr)
}

// runControllerOrHelp runs the controller, unless its flags ask for help
// (-h or --help anywhere, as pflag reads them): then it prints the usage and
// returns 0.
func runControllerOrHelp(args []string, stdout, stderr io.Writer) int {
	var opts controllerOptions
	fs := newControllerFlags(&opts)
	if singleDashFlag(fs, args) == nil && errors.Is(fs.Parse(args), pflag.ErrHelp) {
		printControllerHelp(stdout)
		return 0
	}
	return runController(args, stdout, stderr)
}

// runHelp is `switchyard help [SUBCOMMAND [SUBCOMMAND]]`.
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || wantsHelp(args[:1]) {
		printCommands(stdout)
		return 0
	}
	cmd, ok := lookup(subcommands(), args[0])
	if !ok {
		fmt.Fprintf(stderr, "switchyard help: unknown subcommand %q\n\n", args[0])
		printCommands(stderr)
		return 2
	}
	if cmd.name == "debug" && len(args) > 1 {
		sub, ok := lookup(debugSubcommands(), args[1])
		if !ok {
			fmt.Fprintf(stderr, "switchyard help debug: unknown subcommand %q\n\n", args[1])
			printDebugHelp(stderr)
			return 2
		}
		return printHelp(sub, "switchyard debug "+sub.name, stdout)
	}
	return printHelp(cmd, "switchyard "+cmd.name, stdout)
}

func runVersion(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintln(stdout, versionString())
	return 0
}

// runDebug dispatches `switchyard debug <what>`.
func runDebug(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "switchyard debug: want a subcommand\n\n")
		printDebugHelp(stderr)
		return 2
	}
	if wantsHelp(args[:1]) {
		printDebugHelp(stdout)
		return 0
	}
	cmd, ok := lookup(debugSubcommands(), args[0])
	if !ok {
		fmt.Fprintf(stderr, "switchyard debug: unknown subcommand %q\n\n", args[0])
		printDebugHelp(stderr)
		return 2
	}
	if wantsHelp(args[1:]) {
		return printHelp(cmd, "switchyard debug "+cmd.name, stdout)
	}
	return cmd.run(args[1:], stdout, stderr)
}

func lookup(cmds []subcommand, name string) (subcommand, bool) {
	for _, c := range cmds {
		if c.name == name {
			return c, true
		}
	}
	return subcommand{}, false
}

func printCommands(w io.Writer) {
	fmt.Fprint(w, "Usage: switchyard SUBCOMMAND [flags]\n       switchyard [controller flags]   (as ingress-nginx's controller is started)\n\nSubcommands:\n")
	for _, c := range subcommands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\n`switchyard SUBCOMMAND --help` or `switchyard help SUBCOMMAND` prints a subcommand's usage.\n")
}

func printDebugHelp(w io.Writer) {
	fmt.Fprint(w, "Usage: switchyard debug SUBCOMMAND [flags]\n\nSubcommands:\n")
	for _, c := range debugSubcommands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
}

// printHelp writes cmd's usage to w and returns exit status 0.
func printHelp(cmd subcommand, title string, w io.Writer) int {
	if cmd.help != nil {
		cmd.help(w)
		return 0
	}
	fmt.Fprint(w, flagSetHelp(cmd, title))
	return 0
}

// flagSetHelp returns the usage a subcommand built on the standard flag
// package prints for -h: its flag set writes it to stderr and fails the
// parse, before the command does anything else.
func flagSetHelp(cmd subcommand, title string) string {
	var usage bytes.Buffer
	cmd.run([]string{"-h"}, io.Discard, &usage)
	return strings.Replace(usage.String(), "Usage of "+title+":", "Usage: "+title+" [flags]", 1)
}

// wantsHelp reports whether a standard flag package parse of args meets -h
// or -help (with one or two dashes) before its first non-flag argument.
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			return true
		}
	}
	return false
}
