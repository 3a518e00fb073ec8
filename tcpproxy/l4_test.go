package tcpproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Passthrough with upstream-hash-by $ssl_preread_server_name: each SNI
// always reaches the same backend, and the names spread over both.
func TestPassthroughChashBySNI(t *testing.T) {
	cert := selfSigned(t, "h.example.com")
	named := func(ip, name string) string {
		return listenOn(t, ip, func(c net.Conn) {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
			defer tc.Close()
			_, _ = io.WriteString(tc, name)
		})
	}
	a, b := named("127.0.0.2", "a"), named("127.0.0.3", "b")
	hashBy := "$ssl_preread_server_name"
	reg := registry(t, balancer.Backend{Name: "hashed", Endpoints: []balancer.Endpoint{endpoint(a), endpoint(b)},
		UpstreamHashBy: balancer.UpstreamHashByConfig{HashBy: &hashBy}})
	p, err := newProxy(Config{Picker: reg})
	if err != nil {
		t.Fatal(err)
	}
	p.Update(RoutesFrom(&model.Configuration{PassthroughBackends: []model.PassthroughBackend{{Hostname: "*.h.example.com", Backend: "hashed"}}}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	go func() { _ = p.ServeSNI(ctx, ln) }()
	used := map[string]int{}
	for i := range 16 {
		sni := fmt.Sprintf("host%d.h.example.com", i)
		first := ""
		for range 3 {
			c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: sni, InsecureSkipVerify: true})
			if err != nil {
				t.Fatalf("%s: %v", sni, err)
			}
			got, _ := io.ReadAll(c)
			c.Close()
			if first == "" {
				first = string(got)
				used[first]++
			} else if string(got) != first {
				t.Errorf("%s reached %q after %q; want the same backend", sni, got, first)
			}
		}
	}
	if used["a"] == 0 || used["b"] == 0 {
		t.Errorf("16 SNI names over 2 endpoints: %v; want both used", used)
	}
}

// Removing an endpoint drains it: its established connection keeps
// working, new connections go to the remaining endpoint.
func TestEndpointRemovalDrains(t *testing.T) {
	echo := func(ip, name string) string {
		return listenOn(t, ip, func(c net.Conn) {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, name+": "+line)
			}
		})
	}
	addrs := map[string]string{"a": echo("127.0.0.2", "a"), "b": echo("127.0.0.3", "b")}
	backend := func(names ...string) []balancer.Backend {
		be := balancer.Backend{Name: "tcp-ns-echo-9"}
		for _, n := range names {
			be.Endpoints = append(be.Endpoints, endpoint(addrs[n]))
		}
		return []balancer.Backend{be}
	}
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Sync(backend("a", "b")); err != nil {
		t.Fatal(err)
	}
	p, err := newProxy(Config{Picker: reg})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p.Update(RoutesFrom(&model.Configuration{TCPServices: []model.L4Service{{Port: port, Backend: "tcp-ns-echo-9"}}}))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := p.SyncTCP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	say := func(c net.Conn, br *bufio.Reader, msg string) string {
		t.Helper()
		_, _ = io.WriteString(c, msg+"\n")
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%q: %v", msg, err)
		}
		return strings.TrimSpace(line)
	}
	live, liveBR := dial()
	defer live.Close()
	got := say(live, liveBR, "one")
	drained := got[:1]
	kept := map[string]string{"a": "b", "b": "a"}[drained]
	if err := reg.Sync(backend(kept)); err != nil {
		t.Fatal(err)
	}
	if got := say(live, liveBR, "two"); got != drained+": two" {
		t.Errorf("established connection after removing its endpoint: %q; want %q", got, drained+": two")
	}
	for i := range 4 {
		c, br := dial()
		if got := say(c, br, "new"); got != kept+": new" {
			t.Errorf("new connection %d: %q; want %q", i, got, kept+": new")
		}
		c.Close()
	}
}
