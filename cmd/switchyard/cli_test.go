package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestCLIHelp: every way of asking for help prints the subcommands, or the
// subcommand's usage, to stdout and exits 0.
func TestCLIHelp(t *testing.T) {
	const list = "Usage: switchyard SUBCOMMAND [flags]\n"
	tests := []struct {
		args       []string
		wantPrefix string
	}{
		{nil, list},
		{[]string{"help"}, list},
		{[]string{"--help"}, list},
		{[]string{"-h"}, list},
		{[]string{"help", "help"}, list},
		{[]string{"help", "--help"}, list},
		{[]string{"controller", "--help"}, "Usage: switchyard controller [flags]\n"},
		{[]string{"controller", "-h"}, "Usage: switchyard controller [flags]\n"},
		{[]string{"controller", "--http-port=8080", "--help"}, "Usage: switchyard controller [flags]\n"},
		{[]string{"--watch-namespace=apps", "--help"}, "Usage: switchyard controller [flags]\n"},
		{[]string{"help", "controller"}, "Usage: switchyard controller [flags]\n"},
		{[]string{"balancer", "--help"}, "Usage: switchyard balancer [flags]\n"},
		{[]string{"balancer", "-h"}, "Usage: switchyard balancer [flags]\n"},
		{[]string{"help", "balancer"}, "Usage: switchyard balancer [flags]\n"},
		{[]string{"quickstart", "--help"}, "Usage: switchyard quickstart [flags]\n"},
		{[]string{"help", "quickstart"}, "Usage: switchyard quickstart [flags]\n"},
		{[]string{"debug", "--help"}, "Usage: switchyard debug SUBCOMMAND [flags]\n"},
		{[]string{"help", "debug"}, "Usage: switchyard debug SUBCOMMAND [flags]\n"},
		{[]string{"debug", "pick", "--help"}, "Usage: switchyard debug pick [flags]\n"},
		{[]string{"help", "debug", "pick"}, "Usage: switchyard debug pick [flags]\n"},
		{[]string{"debug", "backends", "-h"}, "Usage: switchyard debug backends [flags]\n"},
		{[]string{"help", "debug", "config"}, "Usage: switchyard debug config [flags]\n"},
		{[]string{"version", "--help"}, "Usage: switchyard version\n"},
		{[]string{"help", "version"}, "Usage: switchyard version\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(tt.args, &stdout, &stderr); got != 0 {
				t.Fatalf("run(%q) = %d; want 0 (stderr %q)", tt.args, got, stderr.String())
			}
			if !strings.HasPrefix(stdout.String(), tt.wantPrefix) {
				t.Errorf("run(%q) printed %q; want it to begin with %q", tt.args, stdout.String(), tt.wantPrefix)
			}
			if stderr.Len() != 0 {
				t.Errorf("run(%q) wrote %q to stderr; want nothing", tt.args, stderr.String())
			}
		})
	}
}

// TestCLIHelpListsSubcommands: the list names every subcommand run accepts.
func TestCLIHelpListsSubcommands(t *testing.T) {
	var stdout bytes.Buffer
	run(nil, &stdout, &bytes.Buffer{})
	for _, c := range subcommands() {
		if !regexp.MustCompile(`(?m)^  ` + c.name + ` +\S`).MatchString(stdout.String()) {
			t.Errorf("switchyard help does not list %q:\n%s", c.name, stdout.String())
		}
	}
}

// TestHelpControllerFlagsGrouped: `switchyard controller --help` shows each
// flag once, under its group's title, in pflag's --flag format.
func TestHelpControllerFlagsGrouped(t *testing.T) {
	var stdout bytes.Buffer
	if got := run([]string{"controller", "--help"}, &stdout, &bytes.Buffer{}); got != 0 {
		t.Fatalf("exit %d; want 0", got)
	}
	help := stdout.String()
	sections := map[string]string{} // title -> its flag lines
	title := ""
	for _, line := range strings.Split(help, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			title = strings.TrimSuffix(line, ":")
			continue
		}
		sections[title] += line + "\n"
	}
	for name, row := range controllerFlagTable {
		flagLine := regexp.MustCompile(`(?m)^ +(-\w, )?--` + regexp.QuoteMeta(name) + `( |$)`)
		if n := len(flagLine.FindAllStringIndex(help, -1)); n != 1 {
			t.Errorf("--%s appears %d times in the help; want 1", name, n)
			continue
		}
		if title := flagGroupTitles[row.Group]; !flagLine.MatchString(sections[title]) {
			t.Errorf("--%s is not under %q", name, title)
		}
	}
}

func TestCLIVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"controller", "--version"}} {
		var stdout, stderr bytes.Buffer
		if got := run(args, &stdout, &stderr); got != 0 {
			t.Errorf("run(%q) = %d; want 0 (stderr %q)", args, got, stderr.String())
		}
		if got, want := stdout.String(), versionString()+"\n"; got != want {
			t.Errorf("run(%q) printed %q; want %q", args, got, want)
		}
	}
}

// TestCLIErrors: unknown subcommands print the list and exit 2; an unknown
// controller flag names the migration guide's flag section.
func TestCLIErrors(t *testing.T) {
	tests := []struct {
		args       []string
		wantStderr []string
	}{
		{[]string{"frobnicate"}, []string{`unknown subcommand "frobnicate"`, "Subcommands:\n  controller"}},
		{[]string{"help", "frobnicate"}, []string{`unknown subcommand "frobnicate"`, "Subcommands:\n  controller"}},
		{[]string{"debug"}, []string{"want a subcommand", "  pick "}},
		{[]string{"debug", "nope"}, []string{`unknown subcommand "nope"`, "  pick "}},
		{[]string{"controller", "--enable-dynamic-certificates"}, []string{"unknown flag: --enable-dynamic-certificates", migrationFlagsSection}},
		{[]string{"--sort-backends"}, []string{"unknown flag: --sort-backends", migrationFlagsSection}},
		{[]string{"controller", "--http-port=x"}, []string{"http-port"}},
		{[]string{"controller", "-http-port=8080"}, []string{"--http-port=8080"}},
		{[]string{"-https-port", "8443", "--help"}, []string{"--https-port"}},
		{[]string{"controller", "--election-ttl=forever"}, []string{"election-ttl"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(tt.args, &stdout, &stderr); got != 2 {
				t.Fatalf("run(%q) = %d; want 2", tt.args, got)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("run(%q) stderr %q; want it to contain %q", tt.args, stderr.String(), want)
				}
			}
		})
	}
}
