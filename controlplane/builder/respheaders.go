package builder

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// reResponseHeader is the name a custom-headers or add-headers field may
// have, as ingress-nginx's customheaders parser allows.
var reResponseHeader = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// validResponseHeader says why a response field cannot be sent the same on
// both planes; nil when it can. Values are literal text: a '$' (an nginx
// variable in ingress-nginx) is refused, since the Go plane has none.
func validResponseHeader(name, value string) error {
	if !reResponseHeader.MatchString(name) {
		return fmt.Errorf("%q is not a header name (letters, digits, '-' and '_')", name)
	}
	if value == "" {
		return fmt.Errorf("the value of %s is empty", name)
	}
	return literalFieldValue(name, value)
}

// literalFieldValue says why value, a field's, is not literal text both
// planes send alike: at most 4096 bytes of printable ASCII, no blank at
// either end, no '$' (nginx would expand a variable).
func literalFieldValue(name, value string) error {
	if len(value) > 4096 || strings.TrimSpace(value) != value {
		return fmt.Errorf("the value of %s is longer than 4096 bytes or starts or ends with a blank", name)
	}
	for i := 0; i < len(value); i++ {
		c := value[i]
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("the value of %s holds a byte other than printable ASCII", name)
		}
		if c == '$' {
			return fmt.Errorf("the value of %s holds '$': nginx variables are not supported, and nginx would expand one", name)
		}
	}
	return nil
}

// namedConfigMap is the ConfigMap a controller ConfigMap key names as
// "namespace/name".
func (b *builder) namedConfigMap(v string) (*corev1.ConfigMap, error) {
	ns, name, found := strings.Cut(strings.TrimSpace(v), "/")
	if !found || !reObjectRef.MatchString(ns+"/"+name) {
		return nil, fmt.Errorf("%q is not namespace/name of a ConfigMap", v)
	}
	cm := b.cms[ns+"/"+name]
	if cm == nil {
		return nil, fmt.Errorf("configmap %s/%s does not exist", ns, name)
	}
	return cm, nil
}

// responseHeaderMap reads a ConfigMap of response fields (add-headers,
// custom-headers), sorted by name; allowed, when not nil, lists the names
// it may hold (global-allowed-response-headers).
func responseHeaderMap(cm *corev1.ConfigMap, allowed []string) ([]model.HeaderField, error) {
	if len(cm.BinaryData) > 0 {
		return nil, fmt.Errorf("configmap %s/%s holds binaryData, which cannot be sent as fields", cm.Namespace, cm.Name)
	}
	out := make([]model.HeaderField, 0, len(cm.Data))
	for k, v := range cm.Data {
		if err := validResponseHeader(k, v); err != nil {
			return nil, fmt.Errorf("configmap %s/%s: %v", cm.Namespace, cm.Name, err)
		}
		if allowed != nil && !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("configmap %s/%s: header %s is not in the ConfigMap's global-allowed-response-headers %v", cm.Namespace, cm.Name, k, allowed)
		}
		out = append(out, model.HeaderField{Name: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// customHeaders reads the ConfigMap custom-headers names for ing ("name" or
// "namespace/name", in the Ingress's namespace), its fields allowed by the
// controller ConfigMap's global-allowed-response-headers, as ingress-nginx
// requires; an error denies the Ingress's locations, as ingress-nginx does.
func (b *builder) customHeaders(ing *networkingv1.Ingress, ref string) ([]model.HeaderField, error) {
	ns, name, err := sameNamespace(ing, ref, "configmap")
	if err != nil {
		return nil, err
	}
	cm := b.cms[ns+"/"+name]
	if cm == nil {
		return nil, fmt.Errorf("configmap %s/%s does not exist", ns, name)
	}
	return responseHeaderMap(cm, b.allowedResponseHeaders)
}

// addHeaders reads the controller ConfigMap's add-headers ("namespace/name"
// of a ConfigMap whose fields go on every response) and
// global-allowed-response-headers. An error is reported and add-headers
// ignored.
func (b *builder) addHeaders(data map[string]string, bad func(key, msg string)) {
	b.allowedResponseHeaders = []string{}
	if v, ok := data["global-allowed-response-headers"]; ok {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h == "" {
				continue
			}
			if !reResponseHeader.MatchString(h) {
				bad("global-allowed-response-headers", fmt.Sprintf("%q is not a header name", h))
				continue
			}
			b.allowedResponseHeaders = append(b.allowedResponseHeaders, h)
		}
	}
	v, ok := data["add-headers"]
	if !ok {
		return
	}
	cm, err := b.namedConfigMap(v)
	if err != nil {
		bad("add-headers", err.Error())
		return
	}
	hs, err := responseHeaderMap(cm, nil)
	if err != nil {
		bad("add-headers", err.Error())
		return
	}
	b.globalHeaders = hs
}

// mergeHeaders is add-headers with an Ingress's custom-headers over it,
// sorted by name.
func mergeHeaders(global, custom []model.HeaderField) []model.HeaderField {
	if len(custom) == 0 {
		return global
	}
	out := append([]model.HeaderField(nil), custom...)
	for _, g := range global {
		if !slices.ContainsFunc(custom, func(c model.HeaderField) bool { return strings.EqualFold(c.Name, g.Name) }) {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// proxySetReserved are the fields every data plane sets upstream itself
// (ingress-nginx's location template): proxy-set-headers may not name them,
// or nginx would send two.
var proxySetReserved = []string{"Host", "Connection", "Upgrade", "X-Request-ID", "X-Real-IP", "X-Forwarded-For",
	"X-Forwarded-Host", "X-Forwarded-Port", "X-Forwarded-Proto", "X-Forwarded-Scheme", "X-Scheme", "X-Forwarded-Prefix",
	"X-Original-URI", "X-Original-Forwarded-For", "X-Original-Forwarded-Host", "Proxy", "Authorization"}

// proxySetHeaders reads the controller ConfigMap's proxy-set-headers
// ("namespace/name" of a ConfigMap whose fields go upstream). Values are
// literal text (ValidProxySetHeader) and may be empty; a field every data
// plane sets itself is refused. An error is reported and the key ignored.
func (b *builder) proxySetHeaders(data map[string]string, bad func(key, msg string)) {
	v, ok := data["proxy-set-headers"]
	if !ok {
		return
	}
	cm, err := b.namedConfigMap(v)
	if err != nil {
		bad("proxy-set-headers", err.Error())
		return
	}
	out := make([]model.HeaderField, 0, len(cm.Data))
	for k, val := range cm.Data {
		if err := ValidProxySetHeader(k, val); err != nil {
			bad("proxy-set-headers", fmt.Sprintf("configmap %s/%s: %v", cm.Namespace, cm.Name, err))
			return
		}
		if slices.ContainsFunc(proxySetReserved, func(r string) bool { return strings.EqualFold(r, k) }) {
			bad("proxy-set-headers", fmt.Sprintf("configmap %s/%s: %s is set by the proxy itself", cm.Namespace, cm.Name, k))
			return
		}
		out = append(out, model.HeaderField{Name: k, Value: val})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	b.proxySetFields = out
}

// literalURI reports whether u is visible ASCII without a quote, a
// backslash or '$', so nginx reads it as one literal word.
func literalURI(u string) bool {
	if len(u) > 2048 {
		return false
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '$' || c == '\'' {
			return false
		}
	}
	return true
}
