package nginxcompat

import (
	"fmt"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// recordingSyncer records how backends reached it.
type recordingSyncer struct{ calls []string }

func (r *recordingSyncer) Sync([]balancer.Backend) error {
	r.calls = append(r.calls, "Sync")
	return nil
}
func (r *recordingSyncer) Apply(b []*model.Backend) error {
	r.calls = append(r.calls, fmt.Sprintf("Apply %d", len(b)))
	return nil
}
func (r *recordingSyncer) ApplyChanged(b []*model.Backend, changed []int) error {
	r.calls = append(r.calls, fmt.Sprintf("ApplyChanged %d %v", len(b), changed))
	return nil
}

// TestUpdateBackendsChanged: an endpoint change naming its backends
// reaches the balancer as such (through the API too); a change without
// them, and the periodic re-assert, apply the whole payload.
func TestUpdateBackendsChanged(t *testing.T) {
	rec := &recordingSyncer{}
	api, err := NewConfigurationAPI(APIConfig{Backends: rec})
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{cfg: ControllerConfig{Backends: api}}
	cfg := &model.Configuration{Backends: []*model.Backend{{Name: "a"}, {Name: "b"}, {Name: "c"}}}
	if err := c.UpdateBackendsChanged(cfg, []int{1}); err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateBackends(cfg); err != nil {
		t.Fatal(err)
	}
	c.reassert()
	want := "[ApplyChanged 3 [1] Apply 3 Apply 3]"
	if got := fmt.Sprint(rec.calls); got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
	if got := len(api.synced); got != 3 {
		t.Errorf("the API reports %d backends, want 3", got)
	}
}
