package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

// use-proxy-protocol on the Go plane: the listener reads the PROXY header
// (tcpproxy/proxyproto.Listener with proxy-real-ip-cidr's ranges) and the
// proxy takes its source as the client's address for X-Forwarded-For,
// X-Real-IP and allow lists, and its destination port for
// X-Forwarded-Port, as nginx's real_ip_header proxy_protocol and
// $proxy_protocol_server_port. Without use-forwarded-headers a client's
// X-Forwarded-For is not read (ingress-nginx writes real_ip_header
// proxy_protocol even with enable-real-ip); with it, it is read behind a
// trusted PROXY source.
func TestProxyProtocolClientAddress(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "xff=%s xrip=%s port=%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Real-Ip"), r.Header.Get("X-Forwarded-Port"))
	}))
	t.Cleanup(up.Close)
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.50/32"), netip.MustParsePrefix("198.51.100.0/24")}
	open := loc("/", model.PathTypePrefix, "up")
	listed := loc("/listed", model.PathTypePrefix, "up")
	listed.AllowSourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	for _, fwd := range []bool{false, true} {
		cfg := &model.Configuration{
			Global:   model.Global{UseForwardedHeaders: fwd, RealIP: &model.RealIP{Header: "X-Forwarded-For", From: trusted, ProxyProtocol: true}},
			Backends: []*model.Backend{{Name: "up", Endpoints: endpoints(strings.TrimPrefix(up.URL, "http://"))}},
			Servers:  []model.Server{{Hostname: "pp.test", Locations: []model.Location{open, listed}}},
		}
		p, _ := newProxy(t, cfg, Config{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pl := proxyproto.NewListener(ln, proxyproto.Policy{On: true, Trusted: trusted})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Serve(ctx, pl) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
		const hdr = "PROXY TCP4 203.0.113.7 192.0.2.1 40000 8443\r\n"
		for _, tc := range []struct {
			name, from, header, path, xff string
			fwdOnly                       bool // the case runs with use-forwarded-headers only
			want                          string
		}{
			{name: "trusted peer", from: "127.0.0.50", header: hdr, path: "/", want: "200 xff=203.0.113.7 xrip=203.0.113.7 port=8443"},
			{name: "trusted peer, allow list", from: "127.0.0.50", header: hdr, path: "/listed", want: "200 xff=203.0.113.7 xrip=203.0.113.7 port=8443"},
			{name: "untrusted peer", from: "127.0.0.1", header: hdr, path: "/", want: "200 xff=127.0.0.1 xrip=127.0.0.1 port=8443"},
			{name: "untrusted peer, allow list", from: "127.0.0.1", header: hdr, path: "/listed", want: "403"},
			{name: "v2", from: "127.0.0.50", path: "/",
				header: string(proxyproto.AppendV2(nil, netip.MustParseAddrPort("203.0.113.9:1"), netip.MustParseAddrPort("192.0.2.1:80"))),
				want:   "200 xff=203.0.113.9 xrip=203.0.113.9 port=80"},
			// The PROXY source is not trusted: its X-Forwarded-For is not
			// read either way.
			{name: "a client's X-Forwarded-For", from: "127.0.0.50", header: hdr, path: "/", xff: "198.51.100.7",
				want: "200 xff=203.0.113.7 xrip=203.0.113.7 port=8443"},
			{name: "behind a trusted PROXY source", from: "127.0.0.50", path: "/", xff: "203.0.113.66", fwdOnly: true,
				header: "PROXY TCP4 198.51.100.1 192.0.2.1 40000 443\r\n", want: "200 xff=203.0.113.66 xrip=203.0.113.66 port=443"},
			{name: "a trusted PROXY source without use-forwarded-headers", from: "127.0.0.50", path: "/", xff: "203.0.113.66",
				header: "PROXY TCP4 198.51.100.1 192.0.2.1 40000 443\r\n", want: "200 xff=198.51.100.1 xrip=198.51.100.1 port=443"},
		} {
			if tc.fwdOnly && !fwd {
				continue
			}
			if tc.name == "a trusted PROXY source without use-forwarded-headers" && fwd {
				continue
			}
			t.Run(fmt.Sprintf("use-forwarded-headers=%v/%s", fwd, tc.name), func(t *testing.T) {
				got := rawGet(t, ln.Addr().String(), tc.from, tc.header, "pp.test", tc.path, tc.xff)
				if got != tc.want {
					t.Errorf("got %q; want %q", got, tc.want)
				}
			})
		}
	}
}

// rawGet sends header, then a GET, from the loopback address from and
// returns "<status> <body>" (the body only for a 200).
func rawGet(t *testing.T, addr, from, header, host, path, xff string) string {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := header + "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
	if xff != "" {
		req += "X-Forwarded-For: " + xff + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprint(resp.StatusCode)
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// Over TLS, to both front ends (HTTP/2 and HTTP/1.1 by ALPN), the PROXY
// header's addresses reach X-Forwarded-For and X-Forwarded-Port alike.
func TestProxyProtocolOverTLS(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "xff=%s port=%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Port"))
	}))
	t.Cleanup(up.Close)
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	cfg := &model.Configuration{
		Global:   model.Global{RealIP: &model.RealIP{Header: "X-Forwarded-For", From: trusted, ProxyProtocol: true}},
		Backends: []*model.Backend{{Name: "up", Endpoints: endpoints(strings.TrimPrefix(up.URL, "http://"))}},
		Servers:  []model.Server{{Hostname: "pp.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "up")}}},
	}
	p, _ := newProxy(t, cfg, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.ServeTLS(ctx, proxyproto.NewListener(ln, proxyproto.Policy{On: true, Trusted: trusted}))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			tr := &http.Transport{ForceAttemptHTTP2: h2, TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "pp.test"}, //nolint:gosec // the proxy's fake certificate
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, network, ln.Addr().String())
					if err == nil {
						_, err = io.WriteString(c, "PROXY TCP4 203.0.113.7 192.0.2.1 40000 8443\r\n")
					}
					return c, err
				}}
			if !h2 {
				tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
			}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://pp.test/", nil)
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if got, want := fmt.Sprintf("%d %d %s", resp.ProtoMajor, resp.StatusCode, b), fmt.Sprintf("%d 200 xff=203.0.113.7 port=8443", map[bool]int{true: 2, false: 1}[h2]); got != want {
				t.Errorf("got %q; want %q", got, want)
			}
		})
	}
}
