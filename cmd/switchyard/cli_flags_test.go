package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the flag table of "+migrationGuide+" from controllerFlagTable")

// ingressNginxFlag is one line of testdata/ingress-nginx-v1.15.1-flags.txt.
type ingressNginxFlag struct {
	name, typ, value string
}

func readIngressNginxFlags(t *testing.T) []ingressNginxFlag {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "ingress-nginx-v1.15.1-flags.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var flags []ingressNginxFlag
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 {
			t.Fatalf("testdata line %q: want name, type and value separated by tabs", line)
		}
		flags = append(flags, ingressNginxFlag{fields[0], fields[1], fields[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// 72 from pkg/flags/flags.go, 15 from klog.
	if len(flags) != 87 {
		t.Fatalf("got %d ingress-nginx flags in testdata; want 87", len(flags))
	}
	return flags
}

// flagForms are the ways ingress-nginx's pflag set takes a flag.
func flagForms(f ingressNginxFlag) [][]string {
	if f.typ == "bool" {
		return [][]string{{"--" + f.name}, {"--" + f.name + "=true"}, {"--" + f.name + "=false"}}
	}
	forms := [][]string{{"--" + f.name + "=" + f.value}, {"--" + f.name, f.value}}
	if len(f.name) == 1 {
		forms = append(forms, []string{"-" + f.name, f.value}, []string{"-" + f.name + "=" + f.value})
	}
	return forms
}

// restoreKlog puts klog's flags back to their values when the test began:
// klog's flags set klog's global state as they are parsed.
func restoreKlog(t *testing.T) {
	var opts controllerOptions
	fs := newControllerFlags(&opts)
	saved := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		if controllerFlagTable[f.Name].Group == groupLogging && f.Name != "v" && f.Name != "log_backtrace_at" {
			saved[f.Name] = f.Value.String()
		}
	})
	t.Cleanup(func() {
		for name, v := range saved {
			if err := fs.Set(name, v); err != nil {
				t.Errorf("restore klog flag %s=%q: %v", name, v, err)
			}
		}
	})
}

// TestIngressNginxFlagsAccepted passes every flag of ingress-nginx
// v1.15.1's controller, in each of its syntaxes, to `switchyard controller
// --version`, which parses and validates all flags before it prints the
// version: none may exit 2.
func TestIngressNginxFlagsAccepted(t *testing.T) {
	restoreKlog(t)
	for _, f := range readIngressNginxFlags(t) {
		for _, form := range flagForms(f) {
			t.Run(strings.Join(form, " "), func(t *testing.T) {
				args := append(append([]string{"controller"}, form...), "--version")
				var stdout, stderr bytes.Buffer
				if got := run(args, &stdout, &stderr); got != 0 {
					t.Fatalf("run(%q) = %d; want 0 (stderr %q)", args, got, stderr.String())
				}
				if got, want := stdout.String(), versionString()+"\n"; got != want {
					t.Errorf("run(%q) printed %q; want %q", args, got, want)
				}
			})
		}
	}
}

// TestIngressNginxFlagsInTable: every ingress-nginx flag has a row, and
// none is marked as Switchyard's own.
func TestIngressNginxFlagsInTable(t *testing.T) {
	for _, f := range readIngressNginxFlags(t) {
		row, ok := controllerFlagTable[f.name]
		switch {
		case !ok:
			t.Errorf("--%s: no row in controllerFlagTable", f.name)
		case row.Status == flagSwitchyardOnly:
			t.Errorf("--%s: status %q; it is an ingress-nginx flag", f.name, row.Status)
		}
	}
}

// TestControllerFlagTableCoversFlags: the table and the flag set name the
// same flags, and every row that has no effect says why.
func TestControllerFlagTableCoversFlags(t *testing.T) {
	var opts controllerOptions
	var defined []string
	newControllerFlags(&opts).VisitAll(func(f *pflag.Flag) { defined = append(defined, f.Name) })
	var rows []string
	for name, row := range controllerFlagTable {
		rows = append(rows, name)
		if (row.Status == flagNoEffect || row.Status == flagDifferent) && row.Note == "" {
			t.Errorf("--%s: status %q without a note", name, row.Status)
		}
		if row.Group < 0 || int(row.Group) >= len(flagGroupTitles) {
			t.Errorf("--%s: group %d has no title", name, row.Group)
		}
	}
	slices.Sort(defined)
	slices.Sort(rows)
	if diff := cmp.Diff(defined, rows); diff != "" {
		t.Errorf("flags defined (-) and rows of controllerFlagTable (+) differ:\n%s", diff)
	}
}

// TestFlagNoEffectWarnsOnce gives each ingress-nginx flag twice and checks
// that a flag without effect writes exactly its one warning, and any other
// flag none.
func TestFlagNoEffectWarnsOnce(t *testing.T) {
	restoreKlog(t)
	for _, f := range readIngressNginxFlags(t) {
		if f.name == "version" {
			continue // --version prints the version and warns about nothing
		}
		t.Run(f.name, func(t *testing.T) {
			form := flagForms(f)[0]
			args := append(slices.Clone(form), form...)
			var stderr bytes.Buffer
			if _, err := parseControllerFlags(args, &stderr); err != nil {
				t.Fatalf("parseControllerFlags(%q): %v", args, err)
			}
			want := ""
			if row := controllerFlagTable[f.name]; row.Status == flagNoEffect {
				want = fmt.Sprintf("switchyard controller: warning: --%s has no effect: %s (%s)\n", f.name, row.Note, migrationFlagsSection)
			}
			if got := stderr.String(); got != want {
				t.Errorf("parseControllerFlags(%q) wrote %q; want %q", args, got, want)
			}
		})
	}
}

// TestFlagIngressNginxNames: the ingress-nginx names of flags Switchyard has
// under another name set the same options.
func TestFlagIngressNginxNames(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantPort   int
		wantAddr   string
		wantPub    string
		wantStderr string
	}{
		{name: "defaults", wantPort: 10254, wantAddr: "127.0.0.1", wantPub: ""},
		{name: "healthz-port", args: []string{"--healthz-port=9000"}, wantPort: 9000, wantAddr: "127.0.0.1"},
		{name: "healthz-host", args: []string{"--healthz-host", ""}, wantPort: 10254, wantAddr: ""},
		{name: "healthz-port wins over status-port", args: []string{"--status-port=10246", "--healthz-port=10254"}, wantPort: 10254, wantAddr: "127.0.0.1",
			wantStderr: "switchyard controller: --status-port=10246 ignored: --healthz-port=10254 sets the status port (in ingress-nginx --status-port is an internal nginx port; " + migrationFlagsSection + ")\n"},
		{name: "update-status keeps publish-service", args: []string{"--publish-service=ns/svc", "--update-status"}, wantPort: 10254, wantAddr: "127.0.0.1", wantPub: "ns/svc"},
		{name: "update-status=false drops publish-service", args: []string{"--publish-service=ns/svc", "--update-status=false"}, wantPort: 10254, wantAddr: "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			opts, err := parseControllerFlags(tt.args, &stderr)
			if err != nil {
				t.Fatalf("parseControllerFlags(%q): %v", tt.args, err)
			}
			if opts.StatusPort != tt.wantPort || opts.StatusAddress != tt.wantAddr || opts.PublishService != tt.wantPub {
				t.Errorf("got status %s:%d, publish-service %q; want %s:%d, %q", opts.StatusAddress, opts.StatusPort, opts.PublishService, tt.wantAddr, tt.wantPort, tt.wantPub)
			}
			if got := stderr.String(); got != tt.wantStderr {
				t.Errorf("stderr %q; want %q", got, tt.wantStderr)
			}
		})
	}
}

var guideTableRE = regexp.MustCompile(`(?s)(<!-- BEGIN flag table[^\n]*-->\n)(.*?)(<!-- END flag table -->)`)

// TestMigrationGuideFlagTable: the migration guide's flag table is the one
// controllerFlagTable renders (go test -run MigrationGuide -update-docs
// rewrites it), and the section warnings and errors name exists.
func TestMigrationGuideFlagTable(t *testing.T) {
	path := filepath.Join("..", "..", migrationGuide)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte("\n"+migrationFlagsHeading+"\n")) {
		t.Errorf("%s has no heading %q, which flag warnings name", migrationGuide, migrationFlagsHeading)
	}
	m := guideTableRE.FindSubmatchIndex(doc)
	if m == nil {
		t.Fatalf("%s has no <!-- BEGIN flag table --> ... <!-- END flag table --> block", migrationGuide)
	}
	want := migrationFlagTable()
	if *updateDocs {
		out := slices.Concat(doc[:m[4]], []byte(want), doc[m[5]:])
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(strings.Split(want, "\n"), strings.Split(string(doc[m[4]:m[5]]), "\n")); diff != "" {
		t.Errorf("%s's flag table differs from controllerFlagTable (-want +got); run go test ./cmd/switchyard -run MigrationGuide -update-docs:\n%s", migrationGuide, diff)
	}
}
