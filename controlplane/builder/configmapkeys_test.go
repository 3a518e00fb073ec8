package builder

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/nginxcompat"
)

const (
	keyTableBegin = "<!-- BEGIN ConfigMap key table: generated from controlplane/builder/configmapkeys.go by `go test ./controlplane/builder -run TestConfigMapKeyTableInDocs -update`; do not edit by hand -->"
	keyTableEnd   = "<!-- END ConfigMap key table -->"
	// keyFacts names every ConfigMap key of ingress-nginx v1.15.1.
	keyFacts = "testdata/ingress-nginx-v1.15.1-configmap-keys.txt"
)

// configMapKeyTable renders the key catalogue as the migration guide's table.
func configMapKeyTable() string {
	var b strings.Builder
	count := map[KeyStatus]int{}
	failClosed := 0
	for _, k := range ConfigMapKeys {
		count[k.Status]++
		if k.Access && (k.Status == KeyUnsupported || k.Status == KeyRefused) {
			failClosed++
		}
	}
	fmt.Fprintf(&b, "Of the %d controller ConfigMap keys ingress-nginx v1.15.1 reads, both data planes honour %d, the nginx data "+
		"plane only %d, the Go data plane only %d; Switchyard refuses %d (snippets) and does not support %d. A key set in the "+
		"ConfigMap that is not honoured on both planes gets a Warning Event on the ConfigMap (`UnsupportedAnnotation`, naming "+
		"the key), and so does a key ingress-nginx v1.15.1 does not know (a typo). The %d access-control keys that are not "+
		"supported make every Ingress path answer **503** while they are set (`FailedClosed`). A value that fails its key's "+
		"grammar is reported on the ConfigMap and the default is kept (an access key's fails closed).\n\n",
		len(ConfigMapKeys), count[BothPlanes], count[NginxPlaneOnly], count[GoPlaneOnly], count[KeyRefused], count[KeyUnsupported], failClosed)
	b.WriteString("| key | Switchyard | notes |\n|---|---|---|\n")
	cell := strings.NewReplacer("|", `\|`).Replace // a bar would end the table cell
	for _, k := range ConfigMapKeys {
		status := k.Status.String()
		if k.Access && (k.Status == KeyUnsupported || k.Status == KeyRefused) {
			status += ", **503** (fail closed)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k.Name, status, cell(k.Note))
	}
	return b.String()
}

// The migration guide's ConfigMap key table is the catalogue's, so the two
// cannot disagree.
func TestConfigMapKeyTableInDocs(t *testing.T) {
	doc, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, keyTableBegin), strings.Index(s, keyTableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", guidePath, keyTableBegin, keyTableEnd)
	}
	want := "\n" + configMapKeyTable() + "\n"
	if *update {
		s = s[:i+len(keyTableBegin)] + want + s[j:]
		if err := os.WriteFile(guidePath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, s[i+len(keyTableBegin):j]); diff != "" {
		t.Errorf("%s's ConfigMap key table is not the catalogue's (run with -update) (-want +got):\n%s", guidePath, diff)
	}
}

// readKeyFacts reads the key names of testdata/ingress-nginx-v1.15.1-configmap-keys.txt.
func readKeyFacts(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(keyFacts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			names = append(names, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// The catalogue names every ConfigMap key of ingress-nginx v1.15.1 exactly
// once, in order, and no other; only snippets are refused; the access keys
// are those globalAccess reads.
func TestConfigMapKeys(t *testing.T) {
	facts := readKeyFacts(t)
	if len(facts) != 196 {
		t.Errorf("%s names %d keys; want 196", keyFacts, len(facts))
	}
	var names []string
	seen := map[string]int{}
	for _, k := range ConfigMapKeys {
		names = append(names, k.Name)
		seen[k.Name]++
		if k.Status < BothPlanes || k.Status > KeyRefused {
			t.Errorf("%s: no status", k.Name)
		}
		if strings.HasSuffix(k.Name, "-snippet") != (k.Status == KeyRefused) {
			t.Errorf("%s: status %s; only snippets are refused, and all of them", k.Name, k.Status)
		}
		access := strings.HasSuffix(k.Name, "-source-range") || strings.HasPrefix(k.Name, "block-") ||
			(strings.HasPrefix(k.Name, "global-auth-") && !strings.HasPrefix(k.Name, "global-auth-cache-")) ||
			k.Name == "modsecurity-snippet"
		if access != k.Access {
			t.Errorf("%s: Access = %v; want %v", k.Name, k.Access, access)
		}
	}
	for _, f := range facts {
		if seen[f] != 1 {
			t.Errorf("%s is in the catalogue %d times; want once", f, seen[f])
		}
	}
	for _, n := range names {
		if !slices.Contains(facts, n) {
			t.Errorf("%s is not a ConfigMap key of ingress-nginx v1.15.1", n)
		}
	}
	if !slices.IsSorted(names) {
		t.Error("the catalogue is not in alphabetical order")
	}
}

// The nginx data plane's template keys are exactly the catalogue's keys
// honoured by the nginx plane that the builder does not carry in the model.
func TestConfigMapKeysOfTheNginxTemplate(t *testing.T) {
	for _, k := range nginxcompat.ConfigMapKeys {
		if s := configMapKeyByName[k].Status; s != BothPlanes && s != NginxPlaneOnly {
			t.Errorf("%s: the nginx template honours it; the catalogue says %s", k, s)
		}
	}
	for _, k := range ConfigMapKeys {
		if k.Status == NginxPlaneOnly && !slices.Contains(nginxcompat.ConfigMapKeys, k.Name) {
			t.Errorf("%s: nginx plane only, but not in nginxcompat.ConfigMapKeys", k.Name)
		}
		if k.Status == GoPlaneOnly && slices.Contains(nginxcompat.ConfigMapKeys, k.Name) {
			t.Errorf("%s: Go plane only, but in nginxcompat.ConfigMapKeys", k.Name)
		}
	}
}

// builderKeys are a valid value, not the default, of each key the builder
// reads into the model, with the other keys it needs to take effect.
var builderKeys = map[string]struct {
	val  string
	with map[string]string
}{
	"load-balance":                          {val: "ewma"},
	"limit-req-status-code":                 {val: "429"},
	"limit-conn-status-code":                {val: "429"},
	"limit-rate":                            {val: "100"},
	"limit-rate-after":                      {val: "10", with: map[string]string{"limit-rate": "100"}},
	"use-forwarded-headers":                 {val: "true"},
	"compute-full-forwarded-for":            {val: "true"},
	"enable-real-ip":                        {val: "true"},
	"forwarded-for-header":                  {val: "X-Client-IP", with: map[string]string{"enable-real-ip": "true"}},
	"proxy-real-ip-cidr":                    {val: "10.0.0.0/8", with: map[string]string{"enable-real-ip": "true"}},
	"ssl-redirect":                          {val: "false"},
	"http-redirect-code":                    {val: "301"},
	"hsts":                                  {val: "false"},
	"hsts-max-age":                          {val: "600"},
	"hsts-include-subdomains":               {val: "false"},
	"hsts-preload":                          {val: "true"},
	"proxy-connect-timeout":                 {val: "7"},
	"proxy-send-timeout":                    {val: "7"},
	"proxy-read-timeout":                    {val: "7"},
	"proxy-body-size":                       {val: "2m"},
	"proxy-next-upstream":                   {val: "error timeout http_502"},
	"proxy-next-upstream-tries":             {val: "5"},
	"proxy-next-upstream-timeout":           {val: "9"},
	"keep-alive":                            {val: "30"},
	"keep-alive-requests":                   {val: "10"},
	"max-worker-connections":                {val: "100"},
	"worker-processes":                      {val: "2"},
	"client-header-timeout":                 {val: "10"},
	"client-header-buffer-size":             {val: "2k"},
	"large-client-header-buffers":           {val: "8 16k"},
	"use-proxy-protocol":                    {val: "true"},
	"proxy-protocol-header-timeout":         {val: "2s"},
	"proxy-http-version":                    {val: "1.0"},
	"whitelist-source-range":                {val: "10.0.0.0/8"},
	"denylist-source-range":                 {val: "10.0.0.0/8"},
	"block-cidrs":                           {val: "10.0.0.0/8"},
	"global-auth-url":                       {val: "http://auth.example/verify"},
	"global-auth-method":                    {val: "GET", with: map[string]string{"global-auth-url": "http://auth.example/verify"}},
	"global-auth-signin":                    {val: "http://auth.example/start", with: map[string]string{"global-auth-url": "http://auth.example/verify"}},
	"global-auth-signin-redirect-param":     {val: "next", with: map[string]string{"global-auth-url": "http://auth.example/verify", "global-auth-signin": "http://auth.example/start"}},
	"global-auth-response-headers":          {val: "X-User", with: map[string]string{"global-auth-url": "http://auth.example/verify"}},
	"global-auth-request-redirect":          {val: "http://auth.example/back", with: map[string]string{"global-auth-url": "http://auth.example/verify"}},
	"global-auth-always-set-cookie":         {val: "true", with: map[string]string{"global-auth-url": "http://auth.example/verify"}},
	"global-auth-cache-key":                 {val: "$remote_addr", with: map[string]string{"global-auth-url": "http://auth.example/verify"}},
	"global-auth-cache-duration":            {val: "200 1m", with: map[string]string{"global-auth-url": "http://auth.example/verify", "global-auth-cache-key": "$remote_addr"}},
	"no-auth-locations":                     {val: "/", with: map[string]string{"global-auth-url": "http://auth.example/verify"}},
	"proxy-buffering":                       {val: "on"},
	"add-headers":                           {val: "shop/hdrs"},
	"proxy-set-headers":                     {val: "shop/hdrs"},
	"service-upstream":                      {val: "true"},
	"proxy-buffer-size":                     {val: "16k"},
	"proxy-buffers-number":                  {val: "8"},
	"skip-access-log-urls":                  {val: "/healthz, /ping?x=1"},
	"proxy-request-buffering":               {val: "off"},
	"client-body-buffer-size":               {val: "16k"},
	"global-allowed-response-headers":       {val: "X-Custom"},
	"worker-shutdown-timeout":               {val: "30s"},
	"server-tokens":                         {val: "true"},
	"enable-access-log-for-default-backend": {val: "true"},
	"ssl-protocols":                         {val: "TLSv1.3"},
	"ssl-ciphers":                           {val: "HIGH:!aNULL"},
	"log-format-upstream":                   {val: "$remote_addr $status"},
	"log-format-escape-json":                {val: "true"},
	"log-format-escape-none":                {val: "true"},
	"upstream-keepalive-connections":        {val: "0"},
	"upstream-keepalive-time":               {val: "10m"},
	"upstream-keepalive-timeout":            {val: "5"},
	"upstream-keepalive-requests":           {val: "100"},
}

// Every key the catalogue says the Go data plane honours, or both planes
// outside the nginx template, changes the model the builder builds, and so
// does an access key that fails closed; every other key changes nothing.
// Every key honoured by some plane is read by the builder: data planes parse
// no ConfigMap string.
func TestConfigMapKeysTheBuilderReads(t *testing.T) {
	in := loadInput(t, "testdata/basic.yaml")
	// A ConfigMap of fields for add-headers and custom-headers, and an
	// Ingress naming it, which global-allowed-response-headers lets serve.
	in.ConfigMaps = append(in.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hdrs"},
		Data: map[string]string{"X-Custom": "1"}})
	custom := in.Ingresses[0].DeepCopy()
	custom.Name += "-custom"
	custom.Annotations = map[string]string{annotationPrefix + "custom-headers": "hdrs"}
	in.Ingresses = append(in.Ingresses, custom)
	for _, svc := range in.Services {
		svc.Spec.ClusterIP = "10.96.0.10" // for service-upstream
	}
	build := func(data map[string]string) string {
		in.ConfigMap = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress", Name: "switchyard"}, Data: data}
		cfg := Build(in, Options{})
		for _, e := range cfg.Errors {
			if e.Object.Kind == "ConfigMap" && e.Reason == "" { // an invalid value
				t.Errorf("%v: %s: %s", data, e.Field, e.Message)
			}
		}
		cfg.Errors, cfg.Version = nil, 0
		b, _ := json.Marshal(cfg)
		return string(b)
	}
	for _, k := range ConfigMapKeys {
		t.Run(k.Name, func(t *testing.T) {
			s, read := builderKeys[k.Name]
			honoured := k.Status == GoPlaneOnly || k.Status == NginxPlaneOnly || k.Status == BothPlanes
			if honoured && !read {
				t.Fatalf("%s: %s, but no value to try in builderKeys", k.Name, k.Status)
			}
			if !read {
				s.val = "1"
			}
			with := map[string]string{}
			for wk, wv := range s.with {
				with[wk] = wv
			}
			base := build(with)
			with[k.Name] = s.val
			changed := build(with) != base
			failsClosed := k.Access && (k.Status == KeyUnsupported || k.Status == KeyRefused)
			if want := read || failsClosed; changed != want {
				t.Errorf("setting %s: %q changes the model: %v; want %v (%s)", k.Name, s.val, changed, want, k.Status)
			}
		})
	}
}

// TestConfigMapKeyErrors: a key of the controller ConfigMap not honoured on
// both planes gets one error naming it; a key honoured on both, or already
// reported (an invalid value, an access key failing closed), gets no other.
func TestConfigMapKeyErrors(t *testing.T) {
	ref := model.ObjectRef{Kind: "ConfigMap", Namespace: "ingress", Name: "switchyard"}
	unsupported := func(key, msg string) model.ObjectError {
		return model.ObjectError{Object: ref, Field: key, Reason: model.ReasonUnsupported,
			Message: msg + " (see the ConfigMap keys of docs/migrating-from-ingress-nginx.md)"}
	}
	const (
		none   = "not supported by Switchyard; it has no effect"
		nginx  = "honoured by the nginx data plane only; it has no effect on the Go data plane"
		goOnly = "honoured by the Go data plane only; it has no effect on the nginx data plane"
	)
	for _, tc := range []struct {
		name string
		data map[string]string
		want []model.ObjectError
	}{
		{name: "both planes", data: map[string]string{"keep-alive": "30", "hsts": "false", "global-auth-url": "http://auth.example/"}},
		{name: "one of each", data: map[string]string{
			"keep-alive":              "30",
			"worker-shutdown-timeout": "10s",
			"client-header-timeout":   "10",
			"use-gzip":                "true",
			"enable-opentelemetry":    "true",
			"http-snippet":            "server_tokens on;",
			"proxy-bufering":          "on",
		}, want: []model.ObjectError{
			unsupported("client-header-timeout", goOnly),
			unsupported("enable-opentelemetry", none),
			unsupported("http-snippet", "snippet keys are refused (raw nginx configuration); it has no effect"),
			unsupported("proxy-bufering", "not a ConfigMap key ingress-nginx v1.15.1 knows; it has no effect"),
			unsupported("use-gzip", none),
			unsupported("worker-shutdown-timeout", nginx),
		}},
		{name: "set empty", data: map[string]string{"use-gzip": ""}, want: []model.ObjectError{unsupported("use-gzip", none)}},
		{name: "invalid value reported once", data: map[string]string{"proxy-buffering": "maybe", "client-header-timeout": "0"},
			want: []model.ObjectError{
				{Object: ref, Field: "proxy-buffering", Message: `"maybe" is not on or off; the default is kept`},
				{Object: ref, Field: "client-header-timeout", Message: `"0" is not an integer of at least 1; the default is kept`},
			}},
		{name: "access keys fail closed once", data: map[string]string{"block-user-agents": "curl", "global-auth-snippet": "return 200;"},
			want: []model.ObjectError{
				{Object: ref, Field: "block-user-agents", Reason: model.ReasonFailedClosed,
					Message: "access control Switchyard does not support yet; every Ingress path answers 503 until it is fixed (fail closed)"},
				{Object: ref, Field: "global-auth-snippet", Reason: model.ReasonFailedClosed,
					Message: "access control Switchyard does not support yet; every Ingress path answers 503 until it is fixed (fail closed)"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress", Name: "switchyard"}, Data: tc.data}
			got := Build(Input{ConfigMap: cm}, Options{}).Errors
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
