package builder

import (
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestConfigurationJSONRoundTrip checks that every golden case's
// Configuration survives JSON whole: the controller sends Configurations
// to its Go worker processes (--go-workers) as JSON, and a field JSON
// loses would be a setting the workers never see.
func TestConfigurationJSONRoundTrip(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			got := Build(loadInput(t, f), caseOptions[name])
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var back model.Configuration
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			// Empty and absent are one in JSON (omitempty).
			if diff := cmp.Diff(got, &back, cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Prefix{}, netip.Addr{})); diff != "" {
				t.Errorf("lost in JSON (-built +read back):\n%s", diff)
			}
		})
	}
}
