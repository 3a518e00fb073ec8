package main

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer/picksock"
)

// TestBalancerMode runs the drop-in mode: an ingress-nginx-shaped backends
// POST over the configuration socket drives the picks answered on the pick
// socket, and a restarted balancer answers from its state file at once.
func TestBalancerMode(t *testing.T) {
	dir := t.TempDir()
	cfgSock, pickSock := filepath.Join(dir, "configuration.sock"), filepath.Join(dir, "pick.sock")
	socks := balancerSockets{config: cfgSock, pick: pickSock, gid: -1, state: filepath.Join(dir, "backends.json")}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- serveBalancer(ctx, socks, ready) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("balancer mode stopped: %v", err)
	}
	for _, p := range []string{cfgSock, pickSock} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o660 {
			t.Errorf("%s: mode %v, %v; want 0660", p, st.Mode().Perm(), err)
		}
	}

	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", cfgSock)
	}}}
	body := `[{"name":"default-echo-80","port":80,"endpoints":[{"address":"10.0.0.1","port":"8080"},{"address":"10.0.0.2","port":"8080"},{"address":"10.0.0.3","port":"8080"}],"sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},"upstreamHashByConfig":{"upstream-hash-by":"$request_uri"},"noServer":false,"trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}}]`
	resp, err := client.Post("http://nginx/configuration/backends", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /configuration/backends = %d; want 201", resp.StatusCode)
	}

	checkPicks(t, pickSock)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("balancer mode: %v", err)
	}
	for _, p := range []string{cfgSock, pickSock} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind after shutdown", p)
		}
	}
	if st, err := os.Stat(socks.state); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v; want mode 0600", st, err)
	}

	// Restarted with no POST: the state file answers.
	ctx, cancel = context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ready = make(chan struct{})
	go func() { done <- serveBalancer(ctx, socks, ready) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("balancer mode stopped: %v", err)
	}
	checkPicks(t, pickSock)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("balancer mode: %v", err)
	}
}

// checkPicks asks the pick socket for the spec §8.1 chash vectors.
func checkPicks(t *testing.T, pickSock string) {
	t.Helper()
	c, err := net.Dial("unix", pickSock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The spec §8.1 chash vectors, asked as the shim would.
	want := map[string]string{"/foo": "10.0.0.3:8080", "/bar": "10.0.0.2:8080", "/": "10.0.0.1:8080"}
	id := uint32(0)
	for uri, peer := range want {
		id++
		if _, err := c.Write(picksock.AppendPick(nil, id, "default-echo-80", "request_uri", uri)); err != nil {
			t.Fatal(err)
		}
		var hdr [4]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatal(err)
		}
		frame := make([]byte, 4+binary.BigEndian.Uint32(hdr[:])) // the length excludes itself
		copy(frame, hdr[:])
		if _, err := io.ReadFull(c, frame[4:]); err != nil {
			t.Fatal(err)
		}
		gotID, reply, err := picksock.DecodePickReply(frame)
		if err != nil || gotID != id || reply.Code != 0 || len(reply.Candidates) == 0 || reply.Candidates[0] != peer {
			t.Errorf("pick %s: id %d reply %+v err %v; want %s", uri, gotID, reply, err, peer)
		}
	}
}

// Debug and configuration ports of balancer mode are loopback only.
func TestBalancerModeRefusesNonLoopback(t *testing.T) {
	for _, flag := range []string{"--stream-address=0.0.0.0:10247", "--pprof-address=192.0.2.1:6060"} {
		var stderr strings.Builder
		if code := runBalancer([]string{flag}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "not a loopback address") {
			t.Errorf("%s: exit %d, %q; want 2 naming the address", flag, code, stderr.String())
		}
	}
}
