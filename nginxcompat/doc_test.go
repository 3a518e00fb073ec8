package nginxcompat

import (
	"os"
	"strings"
	"testing"
)

// The migration guide lists every ConfigMap key the template honours.
func TestMigrationGuideListsConfigMapKeys(t *testing.T) {
	b, err := os.ReadFile("../docs/migrating-from-ingress-nginx.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "## ConfigMap keys")
	j := strings.Index(doc, "Not yet honoured")
	if i < 0 || j < i {
		t.Fatal("docs/migrating-from-ingress-nginx.md has no ConfigMap keys section")
	}
	for _, k := range ConfigMapKeys {
		if !strings.Contains(doc[i:j], "`"+k+"`") {
			t.Errorf("the guide's honoured ConfigMap keys lack %q", k)
		}
	}
}
