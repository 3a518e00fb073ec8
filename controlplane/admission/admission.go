package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	admissionv1 "k8s.io/api/admission/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Path is where ingress-nginx's chart points its
// ValidatingWebhookConfiguration (clientConfig.service.path).
const Path = "/networking/v1/ingresses"

// DefaultMaxBodyBytes bounds a review's body: an object is at most ~3 MiB
// in etcd, and an UPDATE review carries it twice plus the envelope (the
// same bound as ingress-nginx's webhook).
const DefaultMaxBodyBytes = 9 << 20

// maxWarnings bounds the warnings of one response (the API server passes
// them to the client as Warning headers).
const maxWarnings = 20

// Store is the controller's view of the cluster.
type Store interface {
	// AdmissionInput snapshots what a sync reads about candidate; it may
	// leave out Ingresses that share no host and path with candidate
	// (builder.HostPathKeys) and EndpointSlices.
	AdmissionInput(candidate *networkingv1.Ingress) (builder.Input, error)
	// BuildOptions are the options a sync builds with.
	BuildOptions() builder.Options
}

// Config configures a Handler.
type Config struct {
	// Store is the controller's store view. Required.
	Store Store
	// Registerer receives ingress-nginx's admission metrics; nil
	// registers none.
	Registerer prometheus.Registerer
	// MaxBodyBytes bounds a request body; zero means DefaultMaxBodyBytes.
	// A larger body gets 413.
	MaxBodyBytes int64
}

// Handler serves AdmissionReview v1 for Ingresses.
type Handler struct {
	// immutable
	store   Store
	maxBody int64
	m       *metrics // nil without a Registerer
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler; its metrics are registered on
// cfg.Registerer.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("admission: Config.Store is required")
	}
	h := &Handler{store: cfg.Store, maxBody: cfg.MaxBodyBytes}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if cfg.Registerer != nil {
		m, err := newMetrics(cfg.Registerer)
		if err != nil {
			return nil, err
		}
		h.m = m
	}
	return h, nil
}

var ingressKind = metav1.GroupVersionKind{Group: networkingv1.GroupName, Version: "v1", Kind: "Ingress"}

// ServeHTTP answers one AdmissionReview. A body that is not an
// AdmissionReview v1 with a request gets 400, an oversized one 413; an
// Ingress that cannot be decoded is denied.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("request body larger than %d bytes", h.maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	review, err := decodeReview(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review.Response = h.review(review.Request, start)
	review.Request = nil // the response carries the UID, not the objects
	out, err := json.Marshal(review)
	if err != nil {
		http.Error(w, "encode review: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// decodeReview parses an AdmissionReview v1 that has a request.
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("apiVersion %q kind %q: only admission.k8s.io/v1 AdmissionReview is served", review.APIVersion, review.Kind)
	}
	if review.Request == nil || review.Request.UID == "" {
		return nil, errors.New("AdmissionReview without a request or its uid")
	}
	return &review, nil
}

// review decides on one request.
func (h *Handler) review(req *admissionv1.AdmissionRequest, start time.Time) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	deny := func(msg string) *admissionv1.AdmissionResponse {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest,
			Reason: metav1.StatusReasonBadRequest, Message: msg}
		return resp
	}
	if req.Kind != ingressKind {
		// The webhook is registered for Ingresses only; anything else is
		// a misconfiguration, refused rather than waved through.
		return deny(fmt.Sprintf("this webhook reviews %s only, not %s", ingressKind, req.Kind))
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp // DELETE and CONNECT carry no new object
	}
	var ing networkingv1.Ingress
	if err := json.Unmarshal(req.Object.Raw, &ing); err != nil {
		return deny("decode the Ingress: " + err.Error())
	}
	if ing.Namespace == "" {
		ing.Namespace = req.Namespace // absent from CREATE bodies sent without it
	}
	if ing.DeletionTimestamp != nil {
		return resp // being deleted: no sync will serve it
	}
	snap := time.Now()
	in, err := h.store.AdmissionInput(&ing)
	if err != nil {
		// Fail closed: the API server applies the webhook's failurePolicy.
		return deny("read the controller's store: " + err.Error())
	}
	rendered := time.Since(snap)
	tested := time.Now()
	r := builder.ReviewIngress(in, h.store.BuildOptions(), &ing)
	if !r.Ours {
		return resp
	}
	for i, e := range r.Warnings {
		if i == maxWarnings {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("and %d more (see the controller's status page)", len(r.Warnings)-i))
			break
		}
		resp.Warnings = append(resp.Warnings, describe(e))
	}
	if len(r.Denied) > 0 {
		msgs := make([]string, len(r.Denied))
		for i, e := range r.Denied {
			if e.Object.Namespace != ing.Namespace || e.Object.Name != ing.Name {
				msgs[i] = describeDisplaced(e)
			} else {
				msgs[i] = describe(e)
			}
		}
		deny("Switchyard would not serve this Ingress as written: " + strings.Join(msgs, "; "))
		klog.InfoS("admission webhook denied an Ingress", "ingress", klog.KRef(ing.Namespace, ing.Name), "reason", resp.Result.Message)
	}
	if h.m != nil {
		h.m.observe(ing.Namespace, ing.Name, resp.Allowed, r, rendered, time.Since(tested), time.Since(start))
	}
	return resp
}

// describeDisplaced words an error this Ingress would cause on another
// one: a host and path that Ingress serves now.
func describeDisplaced(e model.ObjectError) string {
	return fmt.Sprintf("%s %s/%s would lose a path it serves now: %s: %s", e.Object.Kind, e.Object.Namespace, e.Object.Name, e.Field, e.Message)
}

// describe names an error's object and field, then the builder's message.
func describe(e model.ObjectError) string {
	return fmt.Sprintf("%s %s/%s: %s: %s", e.Object.Kind, e.Object.Namespace, e.Object.Name, e.Field, e.Message)
}
