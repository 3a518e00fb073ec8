package builder

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	guidePath  = "../../docs/migrating-from-ingress-nginx.md"
	tableBegin = "<!-- BEGIN annotation table: generated from controlplane/builder/catalog.go by `go test ./controlplane/builder -run TestAnnotationTableInDocs -update`; do not edit by hand -->"
	tableEnd   = "<!-- END annotation table -->"
)

// annotationTable renders the catalogue as the migration guide's tables.
func annotationTable() string {
	var b strings.Builder
	count := map[Support]int{}
	failClosed := 0
	for _, e := range Catalogue {
		count[e.Support]++
		if e.Access && e.Support != Supported && e.Support != Partial {
			failClosed++
		}
	}
	fmt.Fprintf(&b, "Of the %d annotations ingress-nginx v1.15.1 reads, Switchyard supports %d as ingress-nginx does, %d with a difference "+
		"stated below, refuses %d (snippets) and does not support %d. No annotation is ignored without a word: each one not "+
		"supported gets a Warning Event (`UnsupportedAnnotation`) and a row on the status page, and the %d that grant or restrict "+
		"access and cannot be carried out make every path of their Ingress answer **503** (`FailedClosed`), so nothing "+
		"ingress-nginx would protect is served open.\n",
		len(Catalogue), count[Supported], count[Partial], count[Refused], count[Unsupported], failClosed)
	plane := func(e AnnotationInfo, v string) string {
		switch {
		case v != "":
			return v
		case e.Support == Supported || e.Support == Partial:
			return "yes"
		case e.Access:
			return "**503** (fail closed)"
		}
		return "no (Warning Event)"
	}
	for _, g := range AnnotationGroups {
		fmt.Fprintf(&b, "\n### %s\n\n| annotation | Switchyard | Go data plane | nginx data plane | notes |\n|---|---|---|---|---|\n", g)
		for _, e := range Catalogue {
			if e.Group != g {
				continue
			}
			cell := strings.NewReplacer("|", `\|`).Replace // a bar would end the table cell
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", e.Name, e.Support, cell(plane(e, e.GoPlane)), cell(plane(e, e.NginxPlane)), cell(e.Note))
		}
	}
	return b.String()
}

// The migration guide's annotation table is the catalogue's, so the two
// cannot disagree.
func TestAnnotationTableInDocs(t *testing.T) {
	doc, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, tableBegin), strings.Index(s, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", guidePath, tableBegin, tableEnd)
	}
	want := "\n" + annotationTable() + "\n"
	if *update {
		s = s[:i+len(tableBegin)] + want + s[j:]
		if err := os.WriteFile(guidePath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, s[i+len(tableBegin):j]); diff != "" {
		t.Errorf("%s's annotation table is not the catalogue's (run with -update) (-want +got):\n%s", guidePath, diff)
	}
}

// The catalogue names every annotation once, each in a group, and classes
// access control as the issue tracker's fail-closed list does.
func TestCatalogue(t *testing.T) {
	groups := map[AnnotationGroup]bool{}
	for _, g := range AnnotationGroups {
		groups[g] = true
	}
	seen := map[string]bool{}
	for _, e := range Catalogue {
		if seen[e.Name] {
			t.Errorf("%s listed twice", e.Name)
		}
		seen[e.Name] = true
		if !groups[e.Group] {
			t.Errorf("%s: group %q is not in AnnotationGroups", e.Name, e.Group)
		}
		if e.Support < Supported || e.Support > Unsupported {
			t.Errorf("%s: no support class", e.Name)
		}
		perf := strings.HasPrefix(e.Name, "auth-cache-") || strings.HasPrefix(e.Name, "auth-keepalive")
		// limit-rate and limit-rate-after pace responses: no access.
		limit := strings.HasPrefix(e.Name, "limit-") && !strings.HasPrefix(e.Name, "limit-rate")
		access := (strings.HasPrefix(e.Name, "auth-") && !perf) || limit ||
			strings.HasSuffix(e.Name, "-source-range") || e.Name == "satisfy" || e.Name == "enable-global-auth" ||
			e.Name == "modsecurity-snippet"
		if access != e.Access {
			t.Errorf("%s: Access = %v; want %v", e.Name, e.Access, access)
		}
		if strings.HasSuffix(e.Name, "-snippet") != (e.Support == Refused) {
			t.Errorf("%s: only snippets are refused", e.Name)
		}
	}
	// ingress-nginx v1.15.1: the 130 of its annotations documentation and
	// the 8 its parsers read without documenting them (fastcgi-index,
	// fastcgi-params-configmap, limit-allowlist, allowlist-source-range,
	// disable-proxy-intercept-errors, opentelemetry-operation-name,
	// relative-redirects, use-port-in-redirects).
	if len(Catalogue) != 138 {
		t.Errorf("%d annotations; ingress-nginx v1.15.1 reads 138", len(Catalogue))
	}
}
