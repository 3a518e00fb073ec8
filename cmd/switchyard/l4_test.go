package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestControllerL4Services: the tcp- and udp-services ConfigMaps of a
// manifests directory become listening TCP and UDP services that reach the
// Service's endpoints (the HTTP echo over raw TCP; a real UDP echo).
func TestControllerL4Services(t *testing.T) {
	p1, p2 := freePort(t), freePort(t)
	for i, p := range []int{p1, p2} {
		srv, err := startEchoBackend(fmt.Sprintf("backend-%d", i+1), "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
	}
	udpEcho, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = udpEcho.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := udpEcho.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = udpEcho.WriteTo(append([]byte("echo "), buf[:n]...), from)
		}
	}()
	udpBackendPort := udpEcho.LocalAddr().(*net.UDPAddr).Port

	dir := quickstartDir(t, p1, p2)
	tcpPort, udpPort := freePort(t), freeUDPPort(t)
	extra := fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: tcp-services, namespace: demo}
data:
  "%d": demo/echo:80
---
apiVersion: v1
kind: ConfigMap
metadata: {name: udp-services, namespace: demo}
data:
  "%d": demo/dns:53
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: demo}
spec:
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: %d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-1
  namespace: demo
  labels: {kubernetes.io/service-name: dns}
addressType: IPv4
ports:
- {name: dns, port: %d, protocol: UDP}
endpoints:
- addresses: ["127.0.0.1"]
  conditions: {ready: true}
`, tcpPort, udpPort, udpBackendPort, udpBackendPort)
	if err := os.WriteFile(filepath.Join(dir, "30-l4.yaml"), []byte(extra), 0o600); err != nil {
		t.Fatal(err)
	}
	startController(t, []string{"--manifests", dir, "--http-port", strconv.Itoa(freePort(t)), "--https-port", strconv.Itoa(freePort(t)),
		"--status-port", strconv.Itoa(freePort(t)), "--listen-address", "127.0.0.1",
		"--tcp-services-configmap", "demo/tcp-services", "--udp-services-configmap", "demo/udp-services"})

	// TCP: an HTTP request over the raw TCP service reaches an echo backend.
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(tcpPort), 5*time.Second)
	if err != nil {
		t.Fatalf("tcp service: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /tcp HTTP/1.1\r\nHost: raw\r\nConnection: close\r\n\r\n")
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Errorf("tcp service answered %q, %v", status, err)
	}

	// UDP: a datagram comes back from the echo through the service port.
	u, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(udpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	buf := make([]byte, 256)
	var got string
	for i := 0; i < 50 && got == ""; i++ { // UDP: resend until the listener is up
		_, _ = u.Write([]byte("ping"))
		_ = u.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := u.Read(buf); err == nil {
			got = string(buf[:n])
		}
	}
	if got != "echo ping" {
		t.Errorf("udp service answered %q; want %q", got, "echo ping")
	}
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }()
	return pc.LocalAddr().(*net.UDPAddr).Port
}
