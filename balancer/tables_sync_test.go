package balancer

import "testing"

// TestSyncOfTheSamePayloadKeepsTheGeneration: the controller syncs on every
// change of its Configuration; a payload equal to the last one changes
// nothing, not even Version (the nginx shims would drop their tables and
// leases at every bump), while a different one does.
func TestSyncOfTheSamePayloadKeepsTheGeneration(t *testing.T) {
	r := NewRegistry(Config{})
	payload := func(port string) []Backend {
		return []Backend{{Name: "b", Endpoints: []Endpoint{{Address: "10.0.0.1", Port: PortString(port)}, {Address: "10.0.0.2", Port: PortString(port)}}}}
	}
	if err := r.Sync(payload("80")); err != nil {
		t.Fatal(err)
	}
	v := r.Version()
	changed := r.Changed()
	if err := r.Sync(payload("80")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Fatal("an identical payload signalled a change")
	default:
	}
	if r.Version() != v {
		t.Fatalf("an identical payload moved the version from %d to %d", v, r.Version())
	}
	if err := r.Sync(payload("81")); err != nil {
		t.Fatal(err)
	}
	if r.Version() == v {
		t.Fatal("a different payload kept the version")
	}
	<-changed
}
