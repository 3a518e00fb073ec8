package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// implProduct is `switchyard controller` itself: the product binary in
// manifests mode, one process per path, with its defaults (request metrics
// and the access log on, --l4-event-loops 1).
const implProduct = "switchyard-controller"

// productNames are the paths' names by class.
var productNames = map[string]string{
	classSNI:   "switchyard controller passthrough",
	classTCP:   "switchyard controller tcp",
	classTCPPP: "switchyard controller tcp+PROXY v1",
}

// startProduct runs `bin controller` for one class of path: an Ingress
// with nginx.ingress.kubernetes.io/ssl-passthrough for the bench's host
// (--enable-ssl-passthrough; the path is the HTTPS port), or a tcp-services
// entry (with ::PROXY, the encode field, for tcp+PROXY). The backend is
// target (ppTarget for tcp+PROXY) behind Service bench/tls, port 80
// (harness.LocalServiceYAML). It
// waits until /readyz answers 200 and a TLS handshake through the path
// reaches the backend.
func startProduct(pin bool, bin, dir, class, target, ppTarget string, procs int, conf *tls.Config, size int) (*path, error) {
	pdir := filepath.Join(dir, "product-"+strings.ReplaceAll(class, "+", "-"))
	manifests := filepath.Join(pdir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		return nil, err
	}
	var ports [4]int // http, https, status, tcp service
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	up := target
	if class == classTCPPP {
		up = ppTarget
	}
	host, portText, err := net.SplitHostPort(up)
	if err != nil {
		return nil, fmt.Errorf("backend %q: %w", up, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("backend %q: %w", up, err)
	}
	args := []string{"controller", "--manifests", manifests, "--listen-address", "127.0.0.1",
		"--http-port", strconv.Itoa(ports[0]), "--https-port", strconv.Itoa(ports[1]), "--status-port", strconv.Itoa(ports[2])}
	yaml := harness.LocalServiceYAML("bench", "tls", port, host)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	switch class {
	case classSNI:
		args = append(args, "--enable-ssl-passthrough")
		yaml += fmt.Sprintf(`---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: pass
  namespace: bench
  annotations: {nginx.ingress.kubernetes.io/ssl-passthrough: "true"}
spec:
  ingressClassName: switchyard
  rules:
  - host: %s
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: tls, port: {number: 80}}}}
`, sni)
	case classTCP, classTCPPP:
		encode := ""
		if class == classTCPPP {
			encode = "::PROXY"
		}
		args = append(args, "--tcp-services-configmap", "bench/tcp-services")
		yaml += fmt.Sprintf(`---
apiVersion: v1
kind: ConfigMap
metadata: {name: tcp-services, namespace: bench}
data:
  "%d": bench/tls:80%s
`, ports[3], encode)
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3]))
	default:
		return nil, fmt.Errorf("class %q: the product has no such path in this bench", class)
	}
	if err := os.WriteFile(filepath.Join(manifests, "bench.yaml"), []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	cmd := command(pin, bin, args...)
	cmd.Env = os.Environ()
	if procs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	name := productNames[class]
	// The access log (stdout) and the controller's log go to the output
	// file, as a DaemonSet's would go to its container log.
	p, err := startExternal(name, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])), pdir, 0, cmd)
	if err != nil {
		return nil, err
	}
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2])
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(ready)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("/readyz: %s", resp.Status)
			}
		}
		if err == nil {
			_, _, err = sample(addr, conf, 'd', int64(size))
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			p.stop()
			out, _ := os.ReadFile(filepath.Join(pdir, "output"))
			return nil, fmt.Errorf("%s does not serve after 15 s: %v\n%s", name, err, tail(out, 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &path{name: name, class: class, impl: implProduct, proc: p, addr: addr}, nil
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
