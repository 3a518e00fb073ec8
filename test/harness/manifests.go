package harness

import (
	"fmt"
	"strconv"
	"strings"
)

// LocalServiceYAML is the manifests a controller in manifests mode needs to
// reach backends that are not pods: the IngressClass it serves by default
// (--ingress-class switchyard, --controller-class
// switchyard.dev/ingress-controller; deploy/quickstart), and a
// selector-less Service name in namespace, port 80 named http, whose
// EndpointSlice name-1 lists addrs (IP addresses) on port.
func LocalServiceYAML(namespace, name string, port int, addrs ...string) string {
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: switchyard}
spec: {controller: switchyard.dev/ingress-controller}
---
apiVersion: v1
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
