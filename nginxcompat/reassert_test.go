package nginxcompat

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/balancer/picksock"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Issue 20: a foreign POST /configuration/backends with [] is accepted (as
// ingress-nginx does) and empties every backend, so the host answers 503
// through the real Lua shim; the Controller syncs its own backends again
// within ReassertInterval, a new generation the shim picks up, and the host
// answers 200 again. A re-assert of the payload the balancer holds keeps
// the generation.
func TestReassertUndoesAForeignBackendsPost(t *testing.T) {
	f := newFaultSetup(t)
	lua, err := filepath.Abs("../lua")
	if err != nil {
		t.Fatal(err)
	}
	f.rc.LuaDir = lua
	// The workers (nobody) reach the sockets in f.dir through its parent.
	if err := os.Chmod(filepath.Dir(f.dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// nginx workers run as nobody:nogroup (65534), as in the controller.
	const nogroup = 65534
	reg := balancer.NewRegistry(balancer.Config{})
	picks := picksock.NewServer(picksock.Config{Picker: reg, GID: nogroup, Chown: true})
	pickLn, err := picks.Listen(filepath.Join(f.dir, "pick.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = picks.Serve(pickLn) }()
	t.Cleanup(func() { _ = picks.Close() })
	api, err := NewConfigurationAPI(APIConfig{Backends: reg})
	if err != nil {
		t.Fatal(err)
	}
	apiLn, err := ListenUnix(filepath.Join(f.dir, "configuration.sock"), 0o660, nogroup)
	if err != nil {
		t.Fatal(err)
	}
	apiSrv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = apiSrv.Serve(apiLn) }()
	t.Cleanup(func() { _ = apiSrv.Close() })
	f.rc.PickSocket = filepath.Join(f.dir, "pick.sock")
	f.rc.APISocket = filepath.Join(f.dir, "configuration.sock")
	f.rc.PickTimeout = 2 * time.Second

	const interval = 500 * time.Millisecond
	c, err := NewController(ControllerConfig{Nginx: f.nginx, ConfPath: f.dir + "/nginx.conf", Render: f.rc,
		Backends: api, Logf: t.Logf, Stderr: tlog{t}, ReassertInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	addr, port, _ := strings.Cut(strings.ReplaceAll(f.be, "-", ":"), ":")
	cfg := f.config("echo.example.com", "/")
	cfg.Servers[0].Locations[0].Backend = "default-echo-80"
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backends = []*model.Backend{{Name: "default-echo-80", Endpoints: []model.Endpoint{{Address: addr, Port: uint16(n)}}}}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := c.Update(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	run(t, c)
	cl := testClient()
	base := "http://" + f.httpAddr
	waitServing(t, cl, time.Now().Add(5*time.Second), base+"/a", "echo.example.com", "/a echo.example.com")

	// Re-asserting the payload the balancer holds is free: the generation
	// stays over two intervals.
	gen, changed := reg.Version(), reg.Changed()
	select {
	case <-changed:
		t.Errorf("generation after re-asserting the same backends: got %d; want %d", reg.Version(), gen)
	case <-time.After(2*interval + interval/2):
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.rc.StatusListen+"/configuration/backends", strings.NewReader("[]"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST [] through nginx: %d; want 201", resp.StatusCode)
	}
	posted := time.Now()
	emptied := reg.Version()
	if emptied == gen {
		t.Fatal("POST [] did not change the balancer")
	}
	// [] empties every backend: the host answers 503, as ingress-nginx's
	// Lua does for a backend without a balancer...
	if resp, body, err := get(cl, base+"/b", "echo.example.com"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		if time.Since(posted) < interval {
			t.Fatalf("right after POST []: %v %q %v; want 503", resp, body, err)
		}
		t.Logf("the re-assert came first (%v after the POST)", time.Since(posted))
	}
	// ...until the Controller re-asserts its own, within the interval (and
	// slack for the shim on a loaded machine).
	for {
		resp, body, err := get(cl, base+"/c", "echo.example.com")
		if err == nil && resp.StatusCode == 200 && body == "/c echo.example.com" {
			break
		}
		if time.Since(posted) > interval+3*time.Second {
			t.Fatalf("%v after POST []: %v %.100q %v; balancer generation %d (emptied: %d) with %d backends",
				time.Since(posted), resp, body, err, reg.Version(), emptied, len(reg.Backends()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("serving again %v after POST []", time.Since(posted))
	if got := reg.Version(); got == emptied {
		t.Errorf("generation after the re-assert: still %d", got)
	}
	_, stored := do(t, api, http.MethodGet, "/configuration/backends", "")
	if !strings.Contains(stored, `"name":"default-echo-80"`) {
		t.Errorf("GET /configuration/backends after the re-assert: %.200q", stored)
	}
}
