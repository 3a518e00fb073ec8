// Package admission is Switchyard's validating admission webhook for
// networking.k8s.io/v1 Ingresses (ingress-nginx's --validating-webhook;
// issue 21, item 3).
//
// In: AdmissionReview v1 requests over HTTPS, and the controller's store
// view (Store: the informer caches a sync reads). Out: AdmissionReview v1
// responses that deny an Ingress a sync would refuse or fail closed on,
// with the builder's messages (object and field named), and admit the rest
// with the builder's other findings as warnings. An Ingress of another
// class is admitted untouched.
//
// The verdict comes from builder.ReviewIngress, the same Build a sync
// runs, so validation has one source of truth. Nothing is rendered and no
// nginx -t runs on an object under review (ingress-nginx's CVE-2025-1974
// came through that): the webhook never imports nginxcompat or any data
// plane package. It reads only what the controller already watches, so it
// needs no RBAC of its own.
//
// CertReloader serves the certificate and key files and reloads them when
// they change on disk (cert-manager rotates them in place).
package admission
