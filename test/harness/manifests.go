package harness

import (
	"fmt"
	"strconv"
	"strings"
)

// IngressClassYAML is the IngressClass a controller serves by default
// (--ingress-class switchyard, --controller-class
// switchyard.dev/ingress-controller; deploy/quickstart).
const IngressClassYAML = `apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: switchyard}
spec: {controller: switchyard.dev/ingress-controller}
`

// ServiceYAML is a selector-less Service name in namespace, port 80 named
// http, and its EndpointSlice name-1 listing addrs (IP addresses) on
// port: how manifests reach backends that are not pods.
func ServiceYAML(namespace, name string, port int, addrs ...string) string {
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  ports:
  - {name: http, port: 80, targetPort: %[3]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[2]s-1
  namespace: %[1]s
  labels: {kubernetes.io/service-name: %[2]s}
addressType: IPv4
ports:
- {name: http, port: %[3]d, protocol: TCP}
endpoints:
- addresses: [%[4]s]
  conditions: {ready: true}
`, namespace, name, port, strings.Join(quoted, ", "))
}

// LocalServiceYAML is IngressClassYAML and ServiceYAML: all a controller in
// manifests mode needs, besides an Ingress, to reach addrs on port.
func LocalServiceYAML(namespace, name string, port int, addrs ...string) string {
	return IngressClassYAML + "---\n" + ServiceYAML(namespace, name, port, addrs...)
}
