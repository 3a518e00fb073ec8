package builder

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	countsBegin = "<!-- BEGIN counts: generated from controlplane/builder/catalog.go and configmapkeys.go by `go test ./controlplane/builder -run TestPlaneCountsInDocs -update`; do not edit by hand -->"
	countsEnd   = "<!-- END counts -->"
)

// honouredOn reports whether an annotation is carried out on a data plane
// whose table cell is v (empty: the support class decides).
func honouredOn(e AnnotationInfo, v string) bool {
	return (e.Support == Supported || e.Support == Partial) && !strings.HasPrefix(v, "no")
}

// planeCounts is the sentence at the top of the migration guide: how many
// annotations and ConfigMap keys each data plane honours.
func planeCounts() string {
	var goAnn, nginxAnn int
	for _, e := range Catalogue {
		if honouredOn(e, e.GoPlane) {
			goAnn++
		}
		if honouredOn(e, e.NginxPlane) {
			nginxAnn++
		}
	}
	var goKeys, nginxKeys int
	for _, k := range ConfigMapKeys {
		switch k.Status {
		case BothPlanes:
			goKeys++
			nginxKeys++
		case GoPlaneOnly:
			goKeys++
		case NginxPlaneOnly:
			nginxKeys++
		}
	}
	return fmt.Sprintf("Honoured today, of ingress-nginx v1.15.1's %d annotations and %d controller ConfigMap keys: "+
		"**%d annotations and %d keys on the Go data plane** (`--data-plane=go`, the default) and **%d annotations and %d keys "+
		"on the nginx data plane** (`--data-plane=nginx`); the tables below say which, and what happens to the others.\n",
		len(Catalogue), len(ConfigMapKeys), goAnn, goKeys, nginxAnn, nginxKeys)
}

// The counts at the top of the migration guide are the catalogues'.
func TestPlaneCountsInDocs(t *testing.T) {
	doc, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, countsBegin), strings.Index(s, countsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", guidePath, countsBegin, countsEnd)
	}
	want := "\n" + planeCounts()
	if *update {
		s = s[:i+len(countsBegin)] + want + s[j:]
		if err := os.WriteFile(guidePath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, s[i+len(countsBegin):j]); diff != "" {
		t.Errorf("%s's plane counts are not the catalogues' (run with -update) (-want +got):\n%s", guidePath, diff)
	}
}
