package k8s

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/test/harness"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// webhookPKI writes a CA and a serving certificate for the in-cluster name
// the API server verifies a webhook Service against (<service>.<ns>.svc)
// into dir, and returns the CA (the caBundle) and the files.
func webhookPKI(t *testing.T, dir, dnsName string) (caPEM []byte, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "switchyard-webhook-e2e-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "webhook.crt"), filepath.Join(dir, "webhook.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certFile, keyFile
}

// TestValidatingWebhook runs the switchyard binary with
// --validating-webhook as the controller identity (deploy/base's RBAC,
// nothing more) and registers it with the real kube-apiserver through a
// ValidatingWebhookConfiguration shaped as ingress-nginx's chart's
// (validate.nginx.ingress.kubernetes.io, path /networking/v1/ingresses,
// failurePolicy Fail, admissionReviewVersions v1) whose clientConfig names
// a Service, reached over TLS inside the test network namespace, with the
// caBundle of a CA made here. The API server must then refuse an Ingress
// with a snippet annotation, one with an invalid annotation value, and one
// taking a host and path another Ingress serves, each with the builder's
// message, and admit a good Ingress and an Ingress of another class.
//
// The Service is an ExternalName whose name is the webhook's TEST-NET-1
// address: the API server resolves a webhook Service itself (a ClusterIP
// Service to its ClusterIP, an ExternalName Service to its name, at the
// clientConfig port), and no kube-proxy exists here to carry a ClusterIP
// from --service-cluster-ip-range (10.0.0.0/24, a private range this
// workplace sends no traffic to) to the webhook.
func TestValidatingWebhook(t *testing.T) {
	harness.RequireNetNS(t)
	c := Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}

	// An IngressClass of this test's own controller class, so no other
	// test's controller serves these Ingresses.
	class := "webhook-" + ns
	controllerClass := "switchyard.dev/" + class
	if _, err := admin.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: networkingv1.IngressClassSpec{Controller: controllerClass},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.NetworkingV1().IngressClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The controller, as ControllerUser, with the webhook on a TEST-NET-1
	// address.
	dir := t.TempDir()
	const svcName = "switchyard-admission"
	caPEM, certFile, keyFile := webhookPKI(t, dir, svcName+"."+ns+".svc")
	ip := harness.TestIP(31)
	httpPort, httpsPort, statusPort, hookPort := harness.FreePort(t, ip), harness.FreePort(t, ip), harness.FreePort(t, ip), harness.FreePort(t, ip)
	args := []string{
		"--kubeconfig=" + c.WriteKubeconfig(t, c.ControllerConfig()),
		"--ingress-class=" + class, "--controller-class=" + controllerClass, "--watch-namespace=" + ns,
		"--listen-address=" + ip, "--http-port=" + strconv.Itoa(httpPort), "--https-port=" + strconv.Itoa(httpsPort),
		"--status-address=" + ip, "--status-port=" + strconv.Itoa(statusPort),
		"--validating-webhook=" + net.JoinHostPort(ip, strconv.Itoa(hookPort)),
		"--validating-webhook-certificate=" + certFile, "--validating-webhook-key=" + keyFile,
	}
	ctrl := harness.StartProcess(t, harness.Cmd{Name: "switchyard", Path: buildSwitchyard(t, dir), Args: args, LogDir: dir})
	status := "http://" + net.JoinHostPort(ip, strconv.Itoa(statusPort))
	harness.WaitFor(t, time.Minute, "switchyard /readyz", ctrl, harness.HTTPReady(status+"/readyz", http.StatusOK, nil, nil))

	// The Service the webhook configuration names, and the configuration,
	// limited to this test's namespace.
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svcName},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: ip}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fail, none, equivalent := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Equivalent
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "switchyard-admission-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:        "validate.nginx.ingress.kubernetes.io",
			MatchPolicy: &equivalent,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"},
					Resources: []string{"ingresses"}},
			}},
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svcName,
					Path: ptr.To("/networking/v1/ingresses"), Port: ptr.To(int32(hookPort))},
				CABundle: caPEM,
			},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		}},
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
	})

	pt := networkingv1.PathTypePrefix
	ingress := func(name, ingClass, host string, anns map[string]string) *networkingv1.Ingress {
		return &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: anns},
			Spec: networkingv1.IngressSpec{IngressClassName: &ingClass, Rules: []networkingv1.IngressRule{{Host: host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &pt, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}},
				}}}}}}},
		}
	}
	// builderSays is what builder.Build, run as a sync of this
	// controller over web and ings (oldest first), reports about the
	// last of ings, in the webhook's words ("Ingress ns/name: field:
	// message"): the expected denials come from the builder, not from
	// this test.
	builderSays := func(ings ...*networkingv1.Ingress) string {
		in := builder.Input{
			IngressClasses: []*networkingv1.IngressClass{{ObjectMeta: metav1.ObjectMeta{Name: class},
				Spec: networkingv1.IngressClassSpec{Controller: controllerClass}}},
			Services: []*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}},
		}
		for i, ing := range ings {
			ing = ing.DeepCopy()
			ing.Namespace = ns
			ing.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC))
			in.Ingresses = append(in.Ingresses, ing)
		}
		last := ings[len(ings)-1].Name
		var msgs []string
		for _, e := range builder.Build(in, builder.Options{ControllerClass: controllerClass, IngressClass: class}).Errors {
			if e.Object.Kind == "Ingress" && e.Object.Name == last {
				msgs = append(msgs, fmt.Sprintf("Ingress %s/%s: %s: %s", ns, last, e.Field, e.Message))
			}
		}
		if len(msgs) == 0 {
			t.Fatalf("BUG: the builder reports nothing about Ingress %s", last)
		}
		return strings.Join(msgs, "; ")
	}
	const prefix = `admission webhook "validate.nginx.ingress.kubernetes.io" denied the request: Switchyard would not serve this Ingress as written: `
	denied := func(t *testing.T, ing *networkingv1.Ingress, want string) {
		t.Helper()
		_, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
		if err == nil {
			t.Fatalf("Ingress %s admitted; want denied with %q", ing.Name, want)
		}
		if !apierrors.IsBadRequest(err) && !apierrors.IsInvalid(err) {
			t.Errorf("Ingress %s: error %v (reason %s); want the webhook's 400", ing.Name, err, apierrors.ReasonForError(err))
		}
		if got := err.Error(); got != prefix+want {
			t.Errorf("Ingress %s denied with\n  %s\nwant\n  %s", ing.Name, got, prefix+want)
		}
	}

	// The configuration takes effect once the API server's informer has
	// it: until then a bad Ingress is admitted, and is deleted again.
	snippet := ingress("snippet", class, "snippet.example", map[string]string{
		"nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers \"X: y\";"})
	harness.WaitFor(t, time.Minute, "the API server calling the webhook", ctrl, func(ctx context.Context) (bool, error) {
		_, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, snippet, metav1.CreateOptions{})
		if err == nil {
			return false, admin.NetworkingV1().Ingresses(ns).Delete(ctx, snippet.Name, metav1.DeleteOptions{})
		}
		if strings.Contains(err.Error(), "failed calling webhook") {
			return false, fmt.Errorf("the API server cannot reach the webhook: %w", err)
		}
		return strings.Contains(err.Error(), "denied the request"), nil
	})
	denied(t, snippet, builderSays(snippet))
	badValue := ingress("bad-value", class, "bad.example", map[string]string{"nginx.ingress.kubernetes.io/proxy-body-size": "lots"})
	denied(t, badValue, builderSays(badValue))

	// A good Ingress is admitted, then owns its host and path.
	good := ingress("good", class, "good.example", nil)
	start := time.Now()
	if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, good, metav1.CreateOptions{}); err != nil {
		t.Fatalf("good Ingress: %v", err)
	}
	t.Logf("a good Ingress was admitted in %v (API server round trip, webhook included)", time.Since(start).Round(time.Millisecond))
	// A second Ingress for the same host and path is refused once the
	// controller's cache holds the first (until then it is admitted, and
	// deleted again). Its name sorts before "good": creationTimestamp has
	// whole seconds, and on a tie the builder (as ingress-nginx) lets the
	// greater namespace/name win, so good stays the owner either way.
	taker := ingress("copy", class, "good.example", nil)
	harness.WaitFor(t, 30*time.Second, "the webhook refusing a second Ingress for good.example/", ctrl, func(ctx context.Context) (bool, error) {
		_, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, taker, metav1.CreateOptions{})
		if err == nil {
			return false, admin.NetworkingV1().Ingresses(ns).Delete(ctx, taker.Name, metav1.DeleteOptions{})
		}
		return strings.Contains(err.Error(), "denied the request"), nil
	})
	denied(t, taker, builderSays(good, taker))

	// Another class's Ingress is not ours to judge, snippet and all.
	if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ingress("theirs", "nginx", "good.example", snippet.Annotations), metav1.CreateOptions{}); err != nil {
		t.Errorf("Ingress of another class: %v; want admitted", err)
	}

	// An UPDATE goes through the webhook too.
	cur, err := admin.NetworkingV1().Ingresses(ns).Get(ctx, "good", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Annotations = map[string]string{"nginx.ingress.kubernetes.io/server-snippet": "return 200;"}
	if _, err := admin.NetworkingV1().Ingresses(ns).Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
		t.Error("an UPDATE adding a snippet was admitted")
	} else if want := prefix + builderSays(cur); err.Error() != want {
		t.Errorf("UPDATE denied with\n  %s\nwant\n  %s", err, want)
	}

	// Rotation, as cert-manager does it: new files from a new CA replace
	// the old ones and the caBundle follows. The webhook serves the new
	// certificate without a restart, and the API server, trusting only
	// the new CA, reaches it again.
	newCA, newCert, newKey := webhookPKI(t, t.TempDir(), svcName+"."+ns+".svc")
	for _, f := range [][2]string{{newCert, certFile}, {newKey, keyFile}} {
		if err := os.Rename(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	wantPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(wantPEM)
	hookAddr := net.JoinHostPort(ip, strconv.Itoa(hookPort))
	harness.WaitFor(t, 30*time.Second, "the webhook serving the rotated certificate", ctrl, func(ctx context.Context) (bool, error) {
		d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the test compares the served certificate itself
		conn, err := d.DialContext(ctx, "tcp", hookAddr)
		if err != nil {
			return false, err
		}
		defer conn.Close()
		return bytes.Equal(conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw, blk.Bytes), nil
	})
	got, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Webhooks[0].ClientConfig.CABundle = newCA
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rotated := ingress("rotated", class, "rotated.example", snippet.Annotations)
	harness.WaitFor(t, time.Minute, "the API server calling the webhook with the new caBundle", ctrl, func(ctx context.Context) (bool, error) {
		_, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, rotated, metav1.CreateOptions{})
		if err == nil {
			return false, admin.NetworkingV1().Ingresses(ns).Delete(ctx, rotated.Name, metav1.DeleteOptions{})
		}
		return err.Error() == prefix+builderSays(rotated), nil // "failed calling webhook" while the API server has the old bundle
	})

	// ingress-nginx's webhook metrics, on the status port.
	metrics := scrape(t, status+"/metrics")
	for _, name := range []string{"nginx_ingress_controller_admission_roundtrip_duration", "nginx_ingress_controller_admission_tested_duration"} {
		if v, ok := metrics[name]; !ok || v <= 0 {
			t.Errorf("%s = %v (present %v); want a positive duration", name, v, ok)
		}
	}
	t.Logf("last review: admission_roundtrip_duration %.2f ms, admission_tested_ingresses %v",
		metrics["nginx_ingress_controller_admission_roundtrip_duration"]*1000, metrics["nginx_ingress_controller_admission_tested_ingresses"])
	if v := metrics["nginx_ingress_controller_check_errors"]; v < 5 {
		t.Errorf("check_errors summed to %v; want at least 5 (snippet, bad-value, copy, the UPDATE, rotated)", v)
	}
	if log, err := os.ReadFile(ctrl.LogPath()); err != nil {
		t.Fatal(err)
	} else if strings.Contains(strings.ToLower(string(log)), "forbidden") {
		t.Errorf("the controller hit a Forbidden with the controller's RBAC:\n%s", ctrl.Tail(4000))
	}
}

// scrape reads a Prometheus text page and sums each metric name's samples
// (labels dropped).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec,noctx // a test's own status port
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name = line[:i]
			_, rest, ok = strings.Cut(line[strings.LastIndexByte(line, '}'):], " ")
		}
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64); err == nil {
			out[name] += v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
