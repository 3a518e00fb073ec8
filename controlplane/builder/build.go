package builder

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"hash/maphash"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Input is a snapshot of the informer caches. Slices may be in any order.
type Input struct {
	Ingresses      []*networkingv1.Ingress
	IngressClasses []*networkingv1.IngressClass
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Secrets        []*corev1.Secret
	// ConfigMaps are every ConfigMap, for those annotations name
	// (auth-proxy-set-headers).
	ConfigMaps []*corev1.ConfigMap
	// ConfigMap is the controller ConfigMap; nil means all defaults.
	ConfigMap *corev1.ConfigMap
	// TCPServices and UDPServices are the --tcp-services-configmap and
	// --udp-services-configmap ConfigMaps; nil means none.
	TCPServices, UDPServices *corev1.ConfigMap
}

// Options are the controller flags the build depends on.
type Options struct {
	// ControllerClass is the IngressClass spec.controller this controller
	// serves. Empty means "switchyard.dev/ingress-controller".
	ControllerClass string
	// IngressClass is the --ingress-class name. Empty means "switchyard".
	IngressClass string
	// WatchNamespace limits the build to one namespace; empty means all.
	WatchNamespace string
	// DefaultBackendService is "ns/name" of the default backend Service;
	// empty means the built-in 404 at 127.0.0.1:8181, as ingress-nginx.
	DefaultBackendService string
	// DefaultSSLCertificate is "ns/name" of the kubernetes.io/tls Secret
	// served for unknown SNI (--default-ssl-certificate); empty means the
	// data plane's self-signed fake. An invalid or missing Secret is
	// reported in Configuration.Errors and the fake is used.
	DefaultSSLCertificate string
	// IngressClassByName (--ingress-class-by-name) also accepts an Ingress
	// whose spec.ingressClassName equals IngressClass, whatever controller
	// that IngressClass object names (or if it does not exist). False: only
	// spec.controller decides.
	IngressClassByName bool
	// WatchIngressWithoutClass (--watch-ingress-without-class) accepts
	// Ingresses with neither spec.ingressClassName nor the legacy annotation
	// even when none of our IngressClasses is the cluster default. False:
	// such Ingresses are ours only through a default IngressClass.
	WatchIngressWithoutClass bool
}

// DefaultControllerClass is the IngressClass controller value Switchyard
// serves unless told otherwise.
const DefaultControllerClass = "switchyard.dev/ingress-controller"

func (o Options) withDefaults() Options {
	if o.ControllerClass == "" {
		o.ControllerClass = DefaultControllerClass
	}
	if o.IngressClass == "" {
		o.IngressClass = "switchyard"
	}
	return o
}

const legacyClassAnnotation = "kubernetes.io/ingress.class"

// IsOurs reports whether this controller serves ing, resolving the class as
// ingress-nginx does: spec.ingressClassName naming an IngressClass whose
// spec.controller is ours; else the legacy kubernetes.io/ingress.class
// annotation equal to --ingress-class; else, with neither set, an IngressClass
// of ours marked as the cluster default.
func IsOurs(ing *networkingv1.Ingress, classes []*networkingv1.IngressClass, opt Options) bool {
	opt = opt.withDefaults()
	if opt.WatchNamespace != "" && ing.Namespace != opt.WatchNamespace {
		return false
	}
	if name := ing.Spec.IngressClassName; name != nil {
		if opt.IngressClassByName && *name == opt.IngressClass {
			return true
		}
		for _, c := range classes {
			if c.Name == *name {
				return c.Spec.Controller == opt.ControllerClass
			}
		}
		return false
	}
	if v, ok := ing.Annotations[legacyClassAnnotation]; ok {
		return v == opt.IngressClass
	}
	if opt.WatchIngressWithoutClass {
		return true
	}
	for _, c := range classes {
		if c.Spec.Controller == opt.ControllerClass && c.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true" {
			return true
		}
	}
	return false
}

// builder carries the state of one Build.
type builder struct {
	// madeSettings are the LocationSettings made so far, by the hash of
	// their bytes (sharedSettings).
	madeSettings map[uint64]*model.LocationSettings
	settingsSeed maphash.Seed
	// settingsScratch is where an Ingress's settings are made before
	// sharedSettings finds or keeps them.
	settingsScratch model.LocationSettings

	in       Input
	opt      Options
	cfg      *model.Configuration
	services map[string]*serviceEntry     // ns/name: Services, slices, sources
	secrets  map[string]*corev1.Secret    // ns/name
	cms      map[string]*corev1.ConfigMap // ns/name
	// allowedResponseHeaders is global-allowed-response-headers, the
	// names custom-headers may set (none without the key);
	// globalHeaders is add-headers.
	allowedResponseHeaders []string
	globalHeaders          []model.HeaderField
	// proxySetFields is proxy-set-headers.
	proxySetFields []model.HeaderField
	// serviceUpstream is the ConfigMap's service-upstream, the
	// annotation's default.
	serviceUpstream bool
	// limitRate and limitRateAfter are the ConfigMap's limit-rate and
	// limit-rate-after (KiB), the annotations' defaults.
	limitRate, limitRateAfter int
	// wwwRedirects are the hosts with from-to-www-redirect, each with the
	// oldest Ingress asking for it.
	wwwRedirects map[string]*networkingv1.Ingress
	backends     map[string]*model.Backend // by name
	servers      map[string]*model.Server  // by hostname
	// hostRoots are the hosts whose "/" came from the spec.defaultBackend
	// of the Ingress that created them: any Ingress's "/" path replaces it.
	hostRoots map[string]bool
	// canaryAnns are the canary Ingresses' annotations, for mergeCanaries.
	canaryAnns map[*networkingv1.Ingress]*annotations
	access     globalAccess     // the ConfigMap's access settings
	badAddrs   map[string]bool  // slice/address already reported invalid
	locations  []model.Location // the chunk newLocations carves from
	index      *EndpointIndex   // over services
}

// globalAccess holds the controller ConfigMap's access-control keys.
type globalAccess struct {
	// allow and deny are whitelist-source-range and denylist-source-range:
	// the defaults of the annotations of the same names.
	allow, deny []netip.Prefix
	// block is block-cidrs: refused on every location, the default
	// server's included.
	block []netip.Prefix
	// denied fails every Ingress location closed: a key Switchyard cannot
	// carry out, or whose value is invalid.
	denied *model.Denial
	// globalAuth is global-auth-url and its kin: the external
	// authentication of every Ingress location without its own auth-url,
	// unless the Ingress opts out with enable-global-auth: "false".
	globalAuth *model.ExternalAuth
	// noAuth is no-auth-locations: locations whose path starts with one of
	// these get no external authentication (ingress-nginx's default lets
	// ACME HTTP-01 challenges through).
	noAuth []string
}

// Build translates in into a Configuration. Problems with single objects are
// reported in Configuration.Errors and the rest is built.
func Build(in Input, opt Options) *model.Configuration {
	cfg, _ := BuildIndexed(in, opt)
	return cfg
}

// BuildIndexed is Build, plus the index of which backends took their
// endpoints from which Service's EndpointSlices, with which a change of
// slices alone is applied to the Configuration without building it again
// (EndpointIndex.Refresh).
func BuildIndexed(in Input, opt Options) (*model.Configuration, *EndpointIndex) {
	// The maps are sized up front: growing them one rehash at a time cost
	// a tenth of a 50k-Ingress build. Most Services have a backend and
	// slices; most Ingresses a host of their own.
	b := &builder{
		madeSettings: map[uint64]*model.LocationSettings{},
		settingsSeed: maphash.MakeSeed(),
		in:           in,
		opt:          opt.withDefaults(),
		cfg:          &model.Configuration{Certificates: map[string]model.Certificate{}},
		services:     make(map[string]*serviceEntry, len(in.Services)),
		secrets:      make(map[string]*corev1.Secret, len(in.Secrets)),
		cms:          make(map[string]*corev1.ConfigMap, len(in.ConfigMaps)),
		backends:     make(map[string]*model.Backend, len(in.Services)+1),
		servers:      make(map[string]*model.Server, len(in.Ingresses)+1),
		canaryAnns:   map[*networkingv1.Ingress]*annotations{},
	}
	b.index = &EndpointIndex{byService: b.services}
	entries := make([]serviceEntry, len(in.Services))
	for i, s := range in.Services {
		entries[i].svc = s
		b.services[s.Namespace+"/"+s.Name] = &entries[i]
	}
	for _, es := range in.EndpointSlices {
		if svc := es.Labels[discoveryv1.LabelServiceName]; svc != "" {
			e := b.services[es.Namespace+"/"+svc]
			if e == nil {
				e = new(serviceEntry)
				b.services[es.Namespace+"/"+svc] = e
			}
			e.slices = append(e.slices, es)
		}
	}
	for _, s := range in.Secrets {
		b.secrets[s.Namespace+"/"+s.Name] = s
	}
	for _, cm := range in.ConfigMaps {
		b.cms[cm.Namespace+"/"+cm.Name] = cm
	}
	b.global()

	ours := make([]*networkingv1.Ingress, 0, len(in.Ingresses))
	for _, ing := range in.Ingresses {
		if IsOurs(ing, in.IngressClasses, b.opt) {
			ours = append(ours, ing)
		}
	}
	// Oldest first; on a tie ns/name descending (ingress-nginx's order, so the
	// oldest Ingress sets upstream-level settings and wins host/path clashes).
	sort.SliceStable(ours, func(i, j int) bool {
		ti, tj := ours[i].CreationTimestamp, ours[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return ours[i].Namespace+"/"+ours[i].Name > ours[j].Namespace+"/"+ours[j].Name
	})
	// One pass parses each Ingress's annotations and builds its servers,
	// reusing one annotations value: a value per Ingress (~950 bytes) was
	// a quarter of the memory a 50k-Ingress build allocated. Only
	// canaries' are kept, for mergeCanaries; nothing else keeps a pointer
	// into one. The errors keep the order of two passes: every Ingress's
	// annotation errors, then the default certificate's and server's,
	// then the Ingresses'.
	head := len(b.cfg.Errors)
	b.defaultCertificate()
	b.defaultServer()
	var annErrs []model.ObjectError
	var scratch annotations
	var canaries []*networkingv1.Ingress
	for _, ing := range ours {
		scratch = annotations{}
		a := &scratch
		annErrs = b.ingressAnnotations(ing, a, annErrs)
		if !a.canary {
			b.ingress(ing, a)
			continue
		}
		if a.canaryInvalid != "" {
			// ingress-nginx refuses the whole Ingress; the primary
			// keeps all the traffic rather than a header alone
			// deciding without its value or pattern.
			b.objErr(ing, a.canaryInvalid, "the canary Ingress is not used: its canary annotations are invalid; the primary serves every request")
			continue
		}
		b.canaryAnns[ing] = ptr(scratch)
		canaries = append(canaries, ing)
	}
	b.cfg.Errors = slices.Insert(b.cfg.Errors, head, annErrs...)
	b.mergeCanaries(canaries)
	b.cfg.TCPServices = b.l4(in.TCPServices, "tcp")
	b.cfg.UDPServices = b.l4(in.UDPServices, "udp")
	b.passthrough()
	b.finish()
	return b.cfg, b.index
}

// ingressAnnotations parses ing's annotations into a, which must be zero, looks
// up the Secrets and ConfigMaps they name, and appends their errors to out.
func (b *builder) ingressAnnotations(ing *networkingv1.Ingress, a *annotations, out []model.ObjectError) []model.ObjectError {
	errs := a.parse(ing.Annotations)
	if a.mirror != nil {
		a.mirror = withSource(a.mirror, string(ing.UID))
	}
	if a.clientAuthAnn != nil {
		ca, err := b.clientAuth(ing, a.clientAuthAnn)
		if err != nil {
			a.deny("auth-tls-secret", err.Error())
			errs = append(errs, annotationError{key: annotationPrefix + "auth-tls-secret", reason: model.ReasonFailedClosed,
				msg: err.Error() + "; every path of this Ingress answers 503 until it is fixed (fail closed)"})
		}
		a.clientAuth = ca
	}
	if a.proxySSLAnn != nil {
		warn := func(key, msg string) {
			errs = append(errs, annotationError{key: annotationPrefix + key, reason: model.ReasonUnsupported, msg: msg})
		}
		u, err := b.upstreamTLS(ing, a.proxySSLAnn, warn)
		if err != nil {
			a.deny("proxy-ssl-secret", err.Error())
			errs = append(errs, annotationError{key: annotationPrefix + "proxy-ssl-secret", reason: model.ReasonFailedClosed,
				msg: err.Error() + "; every path of this Ingress answers 503 until it is fixed (fail closed, as ingress-nginx denies them)"})
		}
		a.upstreamTLS = u
	}
	if a.customHeadersRef != "" {
		hs, err := b.customHeaders(ing, a.customHeadersRef)
		if err != nil {
			a.deny("custom-headers", err.Error())
			errs = append(errs, annotationError{key: annotationPrefix + "custom-headers", reason: model.ReasonFailedClosed,
				msg: err.Error() + "; every path of this Ingress answers 503 until it is fixed (ingress-nginx denies them too)"})
		}
		a.customHeaders = hs
	}
	if a.externalAuth != nil && a.authProxySetHeaders != "" {
		hs, err := b.authProxySetHeaders(ing, a.authProxySetHeaders)
		if err != nil {
			a.deny("auth-proxy-set-headers", err.Error())
			errs = append(errs, annotationError{key: annotationPrefix + "auth-proxy-set-headers", reason: model.ReasonFailedClosed,
				msg: err.Error() + "; every path of this Ingress answers 503 until it is fixed (fail closed)"})
		} else {
			ea := *a.externalAuth
			ea.ProxySetHeaders = hs
			a.externalAuth = &ea
		}
	}
	if a.basicAuthAnn != nil && a.basicAuthAnn.digest {
		da, err := b.digestAuth(ing, a.basicAuthAnn)
		if err != nil {
			a.deny("auth-secret", err.Error())
			errs = append(errs, annotationError{key: annotationPrefix + "auth-secret", reason: model.ReasonFailedClosed,
				msg: err.Error() + "; every path of this Ingress answers 503 until it is fixed (fail closed)"})
		}
		a.digestAuth = da
	} else if a.basicAuthAnn != nil {
		ba, err := b.basicAuth(ing, a.basicAuthAnn)
		if err != nil {
			a.deny("auth-secret", err.Error())
			errs = append(errs, annotationError{key: annotationPrefix + "auth-secret", reason: model.ReasonFailedClosed,
				msg: err.Error() + "; every path of this Ingress answers 503 until it is fixed (fail closed)"})
		}
		a.basicAuth = ba
	}
	for _, e := range errs {
		if a.canary && e.reason == model.ReasonFailedClosed {
			// A canary's paths are served by its primary's locations,
			// under the primary's access settings (as ingress-nginx).
			e.reason, e.msg = model.ReasonUnsupported, "not applied on a canary Ingress: the primary Ingress's access settings govern these paths"
		}
		out = append(out, model.ObjectError{Object: ingressRef(ing), Field: e.key, Message: e.msg, Reason: e.reason})
	}
	return out
}

func ingressRef(ing *networkingv1.Ingress) model.ObjectRef {
	return model.ObjectRef{Kind: "Ingress", Namespace: ing.Namespace, Name: ing.Name, UID: string(ing.UID)}
}

func (b *builder) objErr(ing *networkingv1.Ingress, field, msg string) {
	b.cfg.Errors = append(b.cfg.Errors, model.ObjectError{
		Object: ingressRef(ing),
		Field:  field, Message: msg,
	})
}

// global reads the controller ConfigMap keys both data planes use.
func (b *builder) global() {
	g := model.Global{SSLRedirect: true, HTTPRedirectCode: 308, HSTS: true, HSTSMaxAgeSeconds: 31536000, HSTSIncludeSubdomains: true,
		Proxy: model.Proxy{ConnectTimeoutSeconds: 5, SendTimeoutSeconds: 60, ReadTimeoutSeconds: 60, BodySizeBytes: 1 << 20,
			NextUpstream: []string{"error", "timeout"}, NextUpstreamTries: 3, BufferSizeBytes: 4 << 10, BuffersNumber: 4}}
	b.access.noAuth = []string{"/.well-known/acme-challenge"} // ingress-nginx's default
	b.allowedResponseHeaders = []string{}
	cm := b.in.ConfigMap
	if cm != nil {
		ref := model.ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name, UID: string(cm.UID)}
		bad := func(key, msg string) {
			b.cfg.Errors = append(b.cfg.Errors, model.ObjectError{Object: ref, Field: key, Message: msg + "; the default is kept"})
		}
		boolKey := func(key string, dst *bool) {
			if v, ok := cm.Data[key]; ok {
				x, err := strconv.ParseBool(v)
				if err != nil {
					bad(key, fmt.Sprintf("%q is not true or false", v))
					return
				}
				*dst = x
			}
		}
		if v, ok := cm.Data["load-balance"]; ok {
			if isAlgorithm(v) {
				g.LoadBalance = model.Algorithm(v)
			} else {
				bad("load-balance", fmt.Sprintf("%q is not a load-balancing algorithm", v))
			}
		}
		boolKey("use-forwarded-headers", &g.UseForwardedHeaders)
		boolKey("compute-full-forwarded-for", &g.ComputeFullForwardedFor)
		boolKey("ssl-redirect", &g.SSLRedirect)
		boolKey("hsts", &g.HSTS)
		boolKey("hsts-include-subdomains", &g.HSTSIncludeSubdomains)
		boolKey("hsts-preload", &g.HSTSPreload)
		if v, ok := cm.Data["hsts-max-age"]; ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err != nil {
				bad("hsts-max-age", fmt.Sprintf("%q is not a number of seconds", v))
			} else {
				g.HSTSMaxAgeSeconds = uint32(n)
			}
		}
		get := func(key string) (string, bool) { v, ok := cm.Data[key]; return v, ok }
		badf := func(key, format string, args ...any) { bad(key, fmt.Sprintf(format, args...)) }
		integer := func(key string, lo, hi int) (int, bool) {
			v, ok := cm.Data[key]
			if !ok {
				return 0, false
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < lo || n > hi {
				bad(key, fmt.Sprintf("%q is not an integer in [%d, %d]", v, lo, hi))
				return 0, false
			}
			return n, true
		}
		var px annotations
		parseProxyAnnotations(&px, get, badf, integer)
		for _, o := range []struct {
			v   *int
			dst *int
		}{{px.connectTimeout, &g.Proxy.ConnectTimeoutSeconds}, {px.sendTimeout, &g.Proxy.SendTimeoutSeconds},
			{px.readTimeout, &g.Proxy.ReadTimeoutSeconds}, {px.nextUpstreamTries, &g.Proxy.NextUpstreamTries},
			{px.nextUpstreamTimeout, &g.Proxy.NextUpstreamTimeoutSeconds}} {
			if o.v != nil {
				*o.dst = *o.v
			}
		}
		if px.bodySize != nil {
			g.Proxy.BodySizeBytes = *px.bodySize
		}
		if px.nextUpstream != nil {
			g.Proxy.NextUpstream = px.nextUpstream
		}
		if px.buffering != nil {
			g.Proxy.Buffering = *px.buffering
		}
		if px.bufferSize != nil {
			g.Proxy.BufferSizeBytes = *px.bufferSize
		}
		if px.buffersNumber != nil {
			g.Proxy.BuffersNumber = *px.buffersNumber
		}
		if px.noRequestBuffering != nil {
			g.Proxy.NoRequestBuffering = *px.noRequestBuffering
		}
		if px.clientBodyBuffer != nil {
			g.Proxy.ClientBodyBufferBytes = *px.clientBodyBuffer
		}
		if px.http10 != nil {
			g.Proxy.HTTP10 = *px.http10
		}
		b.globalAccess(cm, ref, &g)
		connections(cm.Data, &g, bad)
		g.Nginx = nginxSettings(cm.Data, bad)
		b.addHeaders(cm.Data, bad)
		b.proxySetHeaders(cm.Data, bad)
		boolKey("service-upstream", &b.serviceUpstream)
		if v, ok := cm.Data["skip-access-log-urls"]; ok {
			for _, u := range strings.Split(v, ",") {
				if u = strings.TrimSpace(u); u == "" {
					continue
				}
				if !strings.HasPrefix(u, "/") || !literalURI(u) {
					bad("skip-access-log-urls", fmt.Sprintf("%q is not a request URI (a path and query of visible ASCII, no quote, backslash or $)", u))
					continue
				}
				g.SkipAccessLogURLs = append(g.SkipAccessLogURLs, u)
			}
		}
		g.AccessLogFormat = accessLogFormat(cm.Data, bad)
		if v, ok := cm.Data["http-redirect-code"]; ok {
			switch v {
			case "301", "302", "307", "308":
				g.HTTPRedirectCode, _ = strconv.Atoi(v)
			default:
				bad("http-redirect-code", fmt.Sprintf("%q is not 301, 302, 307 or 308", v))
			}
		}
		if n, ok := integer("limit-req-status-code", 400, 599); ok {
			g.LimitReqStatus = n
		}
		if n, ok := integer("limit-conn-status-code", 400, 599); ok {
			g.LimitConnStatus = n
		}
		if n, ok := integer("limit-rate", 0, maxLimitRate); ok {
			b.limitRate = n
		}
		if n, ok := integer("limit-rate-after", 0, maxLimitRate); ok {
			b.limitRateAfter = n
		}
		b.cfg.Errors = append(b.cfg.Errors, configMapKeyErrors(cm.Data, ref, b.cfg.Errors)...)
	}
	b.cfg.Global = g
}

// builtinDefaultEndpoint is the built-in default backend's address, the
// default backend's only endpoint when --default-backend-service is unset
// or has none (ingress-nginx's 127.0.0.1:8181).
var builtinDefaultEndpoint = model.Endpoint{Address: "127.0.0.1", Port: 8181}

// defaultServer adds the catch-all server and the default backend.
func (b *builder) defaultServer() {
	def := &model.Backend{Name: model.DefaultBackendName}
	if ns, name, ok := strings.Cut(b.opt.DefaultBackendService, "/"); ok {
		if e := b.services[ns+"/"+name]; e.service() != nil && len(e.svc.Spec.Ports) > 0 {
			b.fillEndpoints(def, e, &e.svc.Spec.Ports[0], corev1.ProtocolTCP)
		}
	}
	if len(def.Endpoints) == 0 {
		def.Endpoints = []model.Endpoint{builtinDefaultEndpoint}
	}
	b.backends[def.Name] = def
	b.servers[model.CatchAllHost] = &model.Server{Hostname: model.CatchAllHost, Locations: []model.Location{{
		Path: "/", PathType: model.PathTypePrefix, Backend: def.Name, IsDefaultBackend: true,
		LocationSettings: &model.LocationSettings{
			BackendProtocol: model.ProtocolHTTP, Proxy: b.cfg.Global.Proxy, ResponseHeaders: b.globalHeaders,
			ProxySetHeaders: b.proxySetFields,
			Rewrite:         model.Rewrite{SSLRedirect: b.cfg.Global.SSLRedirect}, DenySourceRanges: b.access.block,
		},
	}}}
}

// globalAccess reads the ConfigMap's access-control keys. The allow, deny
// and block lists are carried out; a key that grants or restricts access and
// is not supported, or an invalid list, fails every Ingress location closed.
func (b *builder) globalAccess(cm *corev1.ConfigMap, ref model.ObjectRef, g *model.Global) {
	ac := &b.access
	failClosed := func(key, msg string) {
		b.cfg.Errors = append(b.cfg.Errors, model.ObjectError{Object: ref, Field: key, Reason: model.ReasonFailedClosed,
			Message: msg + "; every Ingress path answers 503 until it is fixed (fail closed)"})
		if ac.denied == nil {
			ac.denied = &model.Denial{Field: "ConfigMap " + ref.Namespace + "/" + ref.Name + ": " + key, Reason: msg}
		}
	}
	g.RealIP = realIP(cm.Data, g.UseForwardedHeaders, failClosed, func(key, msg string) {
		b.cfg.Errors = append(b.cfg.Errors, model.ObjectError{Object: ref, Field: key, Message: msg + "; the key is not used"})
	})
	for _, l := range []struct {
		key string
		dst *[]netip.Prefix
	}{{"whitelist-source-range", &ac.allow}, {"denylist-source-range", &ac.deny}, {"block-cidrs", &ac.block}} {
		v := strings.TrimSpace(cm.Data[l.key])
		if v == "" {
			continue
		}
		ranges, err := parseSourceRanges(v)
		if err != nil {
			failClosed(l.key, err.Error())
			continue
		}
		*l.dst = ranges
	}
	for _, key := range []string{"block-user-agents", "block-referers", "modsecurity-snippet", "global-auth-snippet"} {
		if strings.TrimSpace(cm.Data[key]) != "" {
			failClosed(key, "access control Switchyard does not support yet")
		}
	}
	// global-auth-*: the grammar of auth-url and its kin.
	get := func(name string) (string, bool) { v, ok := cm.Data["global-"+name]; return v, ok }
	bad := func(name, format string, args ...any) { failClosed("global-"+name, fmt.Sprintf(format, args...)) }
	warn := func(string, string) {}
	boolean := func(name string) bool {
		v, ok := get(name)
		if !ok {
			return false
		}
		x, err := strconv.ParseBool(v)
		if err != nil {
			bad(name, "%q is not true or false", v)
		}
		return x
	}
	if v, ok := get("auth-url"); ok && strings.TrimSpace(v) != "" {
		ac.globalAuth = parseExternalAuth(get, bad, warn, boolean)
	}
	if v, ok := cm.Data["no-auth-locations"]; ok {
		ac.noAuth = nil
		for _, l := range strings.Split(v, ",") {
			if l = strings.TrimSpace(l); l != "" {
				ac.noAuth = append(ac.noAuth, l)
			}
		}
	}
}

// rateLimitZone is the name of an Ingress's rate limit zones:
// namespace_name_uid, with any byte outside [A-Za-z0-9._-] as '_' (names
// and UIDs have none; the name reaches nginx.conf).
func rateLimitZone(ing model.ObjectRef) string {
	b := []byte(ing.Namespace + "_" + ing.Name + "_" + ing.UID)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// applyAccess sets the deny and allow lists and the denial of an Ingress's
// locations from its annotations over the ConfigMap's defaults; noAuth
// for paths under a no-auth-locations prefix, which skip auth-url and
// global-auth-url.
func (b *builder) applyAccess(set *model.LocationSettings, ref model.ObjectRef, a *annotations, noAuth bool) {
	ac := &b.access
	set.AllowSourceRanges = ac.allow
	if a.allowSourceRanges != nil {
		set.AllowSourceRanges = a.allowSourceRanges
	}
	deny := ac.deny
	if a.denySourceRanges != nil {
		deny = a.denySourceRanges
	}
	set.DenySourceRanges = append(append([]netip.Prefix(nil), ac.block...), deny...)
	if len(set.DenySourceRanges) == 0 {
		set.DenySourceRanges = nil
	}
	set.ExternalAuth = a.externalAuth
	if set.ExternalAuth == nil && a.globalAuth {
		set.ExternalAuth = ac.globalAuth
	}
	if noAuth {
		set.ExternalAuth = nil // no-auth-locations, as ingress-nginx
	}
	set.BasicAuth = a.basicAuth
	set.DigestAuth = a.digestAuth
	if a.rateLimit != nil {
		rl := *a.rateLimit
		// One zone per Ingress, named as ingress-nginx names it.
		rl.Zone = rateLimitZone(ref)
		set.RateLimit = &rl
	}
	switch {
	case a.denied != nil:
		set.Denied = a.denied
	case ac.denied != nil:
		set.Denied = ac.denied
	case set.DigestAuth != nil && set.ExternalAuth != nil:
		// One auth_request per location: the nginx plane asks the digest
		// verifier through it, so it cannot also ask an auth-url.
		set.Denied = &model.Denial{Field: annotationPrefix + "auth-type",
			Reason: "digest authentication together with auth-url or global-auth-url is not supported"}
	}
}

// noAuthPath reports whether path is under one of the ConfigMap's
// no-auth-locations.
func (b *builder) noAuthPath(path string) bool {
	for _, p := range b.access.noAuth {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// settings returns the LocationSettings of the Ingress's location at path,
// made once per Ingress (twice with no-auth-locations) and kept in a.
func (b *builder) settings(ing *networkingv1.Ingress, ref model.ObjectRef, a *annotations, path string) *model.LocationSettings {
	i := 0
	if b.noAuthPath(path) {
		i = 1
	}
	if a.settings[i] == nil {
		set := &b.settingsScratch
		*set = model.LocationSettings{BackendProtocol: model.ProtocolHTTP, Proxy: b.cfg.Global.Proxy,
			Rewrite: model.Rewrite{SSLRedirect: b.cfg.Global.SSLRedirect, UseRegex: a.useRegex}}
		b.applyLocationAnnotations(ing, set, a)
		b.applyAccess(set, ref, a, i == 1)
		a.settings[i] = b.sharedSettings(set)
	}
	return a.settings[i]
}

// sharedSettings returns settings equal to *set: ones made before for
// another Ingress when their bytes are the same, else a copy of *set. Equal
// bytes mean the same scalars and the same strings, slices and pointers
// (not merely equal contents), so sharing never changes what a location
// does; settings that differ only in where a string or list lives are not
// shared. Ingresses without annotations of their own, or with the same
// numeric ones, share one value: at 50k Ingresses that is 50k fewer ~500-byte
// values on a fresh heap.
func (b *builder) sharedSettings(set *model.LocationSettings) *model.LocationSettings {
	raw := settingsBytes(set)
	h := maphash.Bytes(b.settingsSeed, raw)
	if s := b.madeSettings[h]; s != nil && bytes.Equal(settingsBytes(s), raw) {
		return s
	}
	own := new(model.LocationSettings)
	*own = *set
	if b.madeSettings[h] == nil {
		b.madeSettings[h] = own
	}
	return own
}

// settingsBytes is the memory of s. Padding is zero: settings live in
// zeroed memory and only whole-struct copies write it.
func settingsBytes(s *model.LocationSettings) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(s)), unsafe.Sizeof(*s))
}

// ingress adds the servers, locations and backends of one non-canary Ingress.
func (b *builder) ingress(ing *networkingv1.Ingress, a *annotations) {
	ref := model.ObjectRef{Kind: "Ingress", Namespace: ing.Namespace, Name: ing.Name, UID: string(ing.UID)}
	tlsHosts := b.tls(ing)
	// spec.defaultBackend, as ingress-nginx uses it: the "/" of each host
	// this Ingress is the first to name, or, with no rules, the catch-all
	// server's "/". Its backend is made first, with port 0, as
	// ingress-nginx makes it.
	var rootPath *networkingv1.HTTPIngressPath
	if d := ing.Spec.DefaultBackend; d != nil && d.Service != nil {
		rootPath = &networkingv1.HTTPIngressPath{Path: "/", PathType: ptr(networkingv1.PathTypePrefix), Backend: *d}
		name := ing.Namespace + "-" + d.Service.Name + "-" + portString(d.Service.Port)
		if b.backends[name] == nil {
			b.backend(ing, a, d.Service, defaultBackendField).Port = model.ServicePort{}
		}
	}
	for ri, rule := range ing.Spec.Rules {
		host := rule.Host
		if host == "" {
			host = model.CatchAllHost
		} else if err := validateHost(host); err != nil {
			b.objErr(ing, fmt.Sprintf("spec.rules[%d].host", ri), err.Error()+"; the rule is ignored")
			continue
		}
		if rootPath != nil && b.servers[host] == nil {
			if loc, ok := b.location(ing, ref, a, host, *rootPath, defaultBackendField); ok {
				b.server(host).Locations = append(b.server(host).Locations, loc)
				if b.hostRoots == nil {
					b.hostRoots = map[string]bool{}
				}
				b.hostRoots[host] = true
			}
		}
		if rule.HTTP == nil {
			continue
		}
		srv := b.server(host)
		if uid, ok := tlsHosts[host]; ok && srv.TLS == nil {
			srv.TLS = &model.ServerTLS{CertificateUID: uid}
		}
		if len(srv.Aliases) == 0 && len(a.serverAliases) > 0 && host != model.CatchAllHost {
			srv.Aliases = a.serverAliases
		}
		if a.clientAuth != nil && srv.ClientAuth == nil && host != model.CatchAllHost {
			// Server-level, as ssl_verify_client: the oldest Ingress of
			// the host that sets it decides.
			srv.ClientAuth = a.clientAuth
		}
		if a.sslPassthrough && host != model.CatchAllHost {
			srv.SSLPassthrough = true
		}
		if a.fromToWWW && host != model.CatchAllHost && !strings.HasPrefix(host, "*.") {
			if b.wwwRedirects == nil {
				b.wwwRedirects = map[string]*networkingv1.Ingress{}
			}
			if b.wwwRedirects[host] == nil {
				b.wwwRedirects[host] = ing
			}
		}
		if cap(srv.Locations) == 0 {
			srv.Locations = b.newLocations(len(rule.HTTP.Paths))
		} else {
			srv.Locations = slices.Grow(srv.Locations, len(rule.HTTP.Paths))
		}
		for pi, p := range rule.HTTP.Paths {
			field := pathField{rule: ri, path: pi}
			loc, ok := b.location(ing, ref, a, host, p, field)
			if !ok {
				continue
			}
			if existing := findLocation(srv, loc.Path, loc.PathType); existing >= 0 {
				if b.hostRoots[host] && loc.Path == "/" && loc.PathType == model.PathTypePrefix {
					// The host's "/" from an Ingress default backend.
					delete(b.hostRoots, host)
					srv.Locations[existing] = loc
					continue
				}
				if !srv.Locations[existing].IsDefaultBackend || host != model.CatchAllHost {
					// The oldest Ingress already owns this host and path.
					b.objErr(ing, field.String(), fmt.Sprintf("path %s %q on host %s is already served by Ingress %s/%s; ignored",
						loc.PathType, loc.Path, host, srv.Locations[existing].Ingress.Namespace, srv.Locations[existing].Ingress.Name))
					continue
				}
				srv.Locations[existing] = loc
				continue
			}
			srv.Locations = append(srv.Locations, loc)
		}
	}
	if rootPath != nil && len(ing.Spec.Rules) == 0 {
		// An Ingress with a default backend and no rules serves the
		// catch-all server's "/".
		loc, ok := b.location(ing, ref, a, model.CatchAllHost, *rootPath, defaultBackendField)
		if ok {
			srv := b.servers[model.CatchAllHost]
			if i := findLocation(srv, "/", model.PathTypePrefix); i >= 0 && srv.Locations[i].IsDefaultBackend {
				srv.Locations[i] = loc
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func findLocation(s *model.Server, path string, pt model.PathType) int {
	for i, l := range s.Locations {
		if l.Path == path && l.PathType == pt {
			return i
		}
	}
	return -1
}

func (b *builder) server(host string) *model.Server {
	s := b.servers[host]
	if s == nil {
		s = &model.Server{Hostname: host}
		b.servers[host] = s
	}
	return s
}

// locationChunk is how many locations newLocations carves from one
// allocation.
const locationChunk = 128

// newLocations returns an empty slice with room for n locations. A
// Location is ~700 bytes and most servers have a few: their own small
// allocations were a tenth of the bytes and a sixth of the CPU of a
// 50k-Ingress build, so they come from shared chunks instead (a server
// that outgrows its room reallocates as append does).
func (b *builder) newLocations(n int) []model.Location {
	if n > locationChunk/8 {
		return make([]model.Location, 0, n)
	}
	if cap(b.locations)-len(b.locations) < n {
		b.locations = make([]model.Location, 0, locationChunk)
	}
	i := len(b.locations)
	b.locations = b.locations[:i+n]
	return b.locations[i : i : i+n]
}

// pathField is the field of an Ingress path in errors:
// "spec.rules[rule].http.paths[path]", or name when set. It is formatted
// only for an error: a Sprintf per path cost 100k allocations per
// 50k-Ingress build.
type pathField struct {
	name       string
	rule, path int
}

// defaultBackendField is spec.defaultBackend's pathField.
var defaultBackendField = pathField{name: "spec.defaultBackend"}

func (f pathField) String() string {
	if f.name != "" {
		return f.name
	}
	return fmt.Sprintf("spec.rules[%d].http.paths[%d]", f.rule, f.path)
}

// location builds one location and its backend; ok is false when the path is
// rejected.
func (b *builder) location(ing *networkingv1.Ingress, ref model.ObjectRef, a *annotations, host string, p networkingv1.HTTPIngressPath, field pathField) (model.Location, bool) {
	path := p.Path
	if path == "" {
		path = "/"
	}
	pt := model.PathTypePrefix
	if p.PathType != nil {
		pt = model.PathType(*p.PathType)
	}
	// ingress-nginx writes regex locations for use-regex, and for
	// rewrite-target too (so captures exist).
	regex := (a.useRegex || a.rewriteTarget != "") && pt == model.PathTypeImplementationSpecific
	if err := validatePath(path, regex); err != nil {
		b.objErr(ing, field.String()+".path", err.Error()+"; the path is ignored")
		return model.Location{}, false
	}
	if p.Backend.Service == nil {
		b.objErr(ing, field.String()+".backend", "only Service backends are supported; the path is ignored")
		return model.Location{}, false
	}
	be := b.backend(ing, a, p.Backend.Service, field)
	if be == nil {
		return model.Location{}, false
	}
	b.affinityFor(be, a, host, path)
	return model.Location{
		Path: path, PathType: pt, Regex: regex, Ingress: ref,
		Service: p.Backend.Service.Name, ServicePort: portString(p.Backend.Service.Port),
		Backend: be.Name, LocationSettings: b.settings(ing, ref, a, path),
	}, true
}

// applyLocationAnnotations copies validated per-location annotations onto
// an Ingress's settings, over the ConfigMap defaults.
func (b *builder) applyLocationAnnotations(ing *networkingv1.Ingress, loc *model.LocationSettings, a *annotations) {
	if a.backendProtocol != "" {
		loc.BackendProtocol = model.BackendProtocol(a.backendProtocol)
	}
	if loc.BackendProtocol == model.ProtocolHTTPS {
		loc.UpstreamTLS = a.upstreamTLS // proxy_ssl_* apply to proxy_pass https only
	}
	loc.ResponseHeaders = mergeHeaders(b.globalHeaders, a.customHeaders)
	loc.NoAccessLog = a.noAccessLog
	loc.ProxySetHeaders = b.proxySetFields
	rate, after := b.limitRate, b.limitRateAfter
	if a.limitRate != nil {
		rate = *a.limitRate
	}
	if a.limitRateAfter != nil {
		after = *a.limitRateAfter
	}
	loc.ResponseRate = responseRate(rate, after)
	if a.sslRedirect != nil {
		loc.Rewrite.SSLRedirect = *a.sslRedirect
	}
	loc.Rewrite.ForceSSLRedirect = a.forceSSLRedirect
	loc.Rewrite.Target = a.rewriteTarget
	loc.Rewrite.AppRoot = a.appRoot
	loc.Rewrite.PreserveTrailingSlash = a.preserveTrailingSlash
	loc.Redirect = model.Redirect{URL: a.redirectURL, Code: a.redirectCode}
	// loc.Proxy.NextUpstream is the ConfigMap's list, shared by every
	// location as an annotation's is by the Ingress's locations: the model
	// is not written once built.
	px := &loc.Proxy
	for _, o := range []struct {
		v   *int
		dst *int
	}{{a.connectTimeout, &px.ConnectTimeoutSeconds}, {a.sendTimeout, &px.SendTimeoutSeconds}, {a.readTimeout, &px.ReadTimeoutSeconds},
		{a.nextUpstreamTries, &px.NextUpstreamTries}, {a.nextUpstreamTimeout, &px.NextUpstreamTimeoutSeconds}} {
		if o.v != nil {
			*o.dst = *o.v
		}
	}
	if a.bodySize != nil {
		px.BodySizeBytes = *a.bodySize
	}
	if a.nextUpstream != nil {
		px.NextUpstream = a.nextUpstream
	}
	if a.buffering != nil {
		px.Buffering = *a.buffering
	}
	if a.bufferSize != nil {
		px.BufferSizeBytes = *a.bufferSize
	}
	if a.buffersNumber != nil {
		px.BuffersNumber = *a.buffersNumber
	}
	if a.noRequestBuffering != nil {
		px.NoRequestBuffering = *a.noRequestBuffering
	}
	if a.clientBodyBuffer != nil {
		px.ClientBodyBufferBytes = *a.clientBodyBuffer
	}
	if a.http10 != nil {
		px.HTTP10 = *a.http10
	}
	if a.cors.enabled {
		loc.CORS = model.CORS{Enabled: true, AllowOrigin: a.cors.allowOrigin, AllowMethods: a.cors.allowMethods,
			AllowHeaders: a.cors.allowHeaders, ExposeHeaders: a.cors.exposeHeaders,
			AllowCredentials: a.cors.allowCredentials, MaxAgeSeconds: a.cors.maxAge}
	}
	loc.CustomHTTPErrors = a.customHTTPErrors
	loc.UpstreamVhost = a.upstreamVhost
	loc.XForwardedPrefix = a.xForwardedPrefix
	loc.Mirror = a.mirror
	if a.defaultBackend != "" {
		loc.CustomDefaultBackend = b.customDefaultBackend(ing, a.defaultBackend)
	}
}

// customDefaultBackend returns the backend of the default-backend annotation's
// Service (ingress-nginx's custom-default-backend-<ns>-<svc>).
func (b *builder) customDefaultBackend(ing *networkingv1.Ingress, svcName string) string {
	name := "custom-default-backend-" + ing.Namespace + "-" + svcName
	if b.backends[name] != nil {
		return name
	}
	e := b.services[ing.Namespace+"/"+svcName]
	svc := e.service()
	if svc == nil || len(svc.Spec.Ports) == 0 {
		b.objErr(ing, annotationPrefix+"default-backend", fmt.Sprintf("Service %s/%s does not exist or has no ports; the annotation is ignored", ing.Namespace, svcName))
		return ""
	}
	be := &model.Backend{Name: name, Port: model.ServicePort{Number: svc.Spec.Ports[0].Port}, HasService: true}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		be.ExternalName = svc.Spec.ExternalName
	}
	b.fillEndpoints(be, e, &svc.Spec.Ports[0], corev1.ProtocolTCP)
	b.backends[name] = be
	return name
}

func portString(p networkingv1.ServiceBackendPort) string {
	if p.Name != "" {
		return p.Name
	}
	return strconv.Itoa(int(p.Number))
}

// backend returns the backend for a Service port, creating it (with the
// upstream-level settings of this, the oldest, Ingress) on first use.
func (b *builder) backend(ing *networkingv1.Ingress, a *annotations, sb *networkingv1.IngressServiceBackend, field pathField) *model.Backend {
	port := portString(sb.Port)
	name := ing.Namespace + "-" + sb.Name + "-" + port
	if be := b.backends[name]; be != nil {
		return be
	}
	be := &model.Backend{Name: name, Port: model.ServicePort{Name: sb.Port.Name, Number: sb.Port.Number}}
	if sb.Port.Name != "" {
		be.Port.Number = 0
	}
	be.Algorithm = model.Algorithm(a.loadBalance)
	if be.Algorithm == "" {
		be.Algorithm = b.cfg.Global.LoadBalance
	}
	if a.hashBy != nil {
		be.HashBy = &model.HashBy{Key: *a.hashBy, Subset: a.hashBySubset, SubsetSize: a.hashBySubsetSize}
	}
	if a.canary {
		be.NoServer = true
		be.Canary = model.Canary{Weight: a.canaryWeight, WeightTotal: a.canaryWeightTotal,
			Header: a.canaryHeader, HeaderValue: a.canaryHeaderValue, Cookie: a.canaryCookie}
		if a.canaryHeaderPattern != "" {
			be.Canary.HeaderPattern = model.NewRegexp(a.canaryHeaderPattern)
		}
	}
	e := b.services[ing.Namespace+"/"+sb.Name]
	svc := e.service()
	if svc == nil {
		b.objErr(ing, field.String()+".backend.service", fmt.Sprintf("Service %s/%s does not exist; the backend has no endpoints", ing.Namespace, sb.Name))
	} else if svc.Spec.Type == corev1.ServiceTypeExternalName && !validExternalName(svc.Spec.ExternalName) {
		b.objErr(ing, field.String()+".backend.service", fmt.Sprintf("Service %s/%s is an ExternalName whose name %q is neither an IP nor a DNS name; the backend has no endpoints",
			ing.Namespace, sb.Name, svc.Spec.ExternalName))
	} else if sp, ok := servicePort(svc, sb.Port); !ok {
		b.objErr(ing, field.String()+".backend.service.port", fmt.Sprintf("Service %s/%s has no port %s; the backend has no endpoints", ing.Namespace, sb.Name, port))
	} else {
		be.HasService = true
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			be.ExternalName = svc.Spec.ExternalName
		}
		be.Endpoints = b.endpoints(e, *sp, corev1.ProtocolTCP)
		// service-upstream: the Service's cluster IP and port as the one
		// endpoint, as ingress-nginx; without a cluster IP it says so and
		// keeps the endpoints, which then come from slices.
		// The cluster IP is parsed only then: an empty one's error
		// allocates, for every backend.
		up := a.serviceUpstream
		if upstream := (up != nil && *up) || (up == nil && b.serviceUpstream); !upstream {
			record(e, be.Name, sp, corev1.ProtocolTCP)
		} else if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && svc.Spec.Type != corev1.ServiceTypeExternalName {
			be.Endpoints = []model.Endpoint{{Address: ip.String(), Port: uint16(sp.Port)}}
		} else {
			b.objErr(ing, annotationPrefix+"service-upstream", fmt.Sprintf("Service %s/%s has no cluster IP; its endpoints are used", ing.Namespace, sb.Name))
			record(e, be.Name, sp, corev1.ProtocolTCP)
		}
		if svc.Spec.Type == corev1.ServiceTypeExternalName && isLoopback(svc.Spec.ExternalName) {
			b.objErr(ing, field.String()+".backend.service", fmt.Sprintf("Service %s/%s is an ExternalName pointing at loopback (%s), which is refused; the backend has no endpoints",
				ing.Namespace, sb.Name, svc.Spec.ExternalName))
		}
	}
	b.backends[name] = be
	return be
}

// servicePort finds the Service port an Ingress backend names, as
// ingress-nginx does: the first port whose number, target port or name
// spells the backend's port. An ExternalName Service needs no ports: a
// numbered backend port is then its own target port (the ExternalName's
// endpoint gets it).
func servicePort(svc *corev1.Service, p networkingv1.ServiceBackendPort) (*corev1.ServicePort, bool) {
	want := portString(p)
	// spells reports whether want is n in decimal, formatted on the stack:
	// TargetPort.String() allocated for every backend.
	spells := func(n int32) bool {
		var buf [12]byte
		return string(strconv.AppendInt(buf[:0], int64(n), 10)) == want
	}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		target := sp.TargetPort.StrVal == want
		if sp.TargetPort.Type == intstr.Int {
			target = spells(sp.TargetPort.IntVal)
		}
		if spells(sp.Port) || target || sp.Name == want {
			return sp, true
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName && p.Name == "" && p.Number > 0 {
		return &corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: p.Number, TargetPort: intstr.FromInt32(p.Number)}, true
	}
	return nil, false
}

// validExternalName reports whether an ExternalName Service's name is an IP
// or a DNS subdomain (a trailing dot allowed); ingress-nginx gives other
// names no endpoints.
func validExternalName(name string) bool {
	if net.ParseIP(name) != nil {
		return true
	}
	return len(validation.IsDNS1123Subdomain(strings.TrimSuffix(name, "."))) == 0
}

// endpoints lists the endpoints of a Service port as ingress-nginx does: an
// ExternalName Service's one endpoint (its name and target port), or the
// ready endpoints of its EndpointSlices (ready unset counts as ready,
// terminating is not looked at; nothing else stands in when none is ready),
// deduplicated by address and port. A slice's ports are those of the
// protocol proto (TCP for HTTP) named like the Service port (any name when the Service port
// has none); a slice port of another name, or a slice without ports, gives
// the Service's numeric target port instead (ingress-nginx #7390), and
// nothing when the target port is a name. Slices are read in name order
// (ingress-nginx's order is its cache's, which varies).
func (b *builder) endpoints(e *serviceEntry, sp corev1.ServicePort, proto corev1.Protocol) []model.Endpoint {
	svc := e.svc
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if isLoopback(svc.Spec.ExternalName) || !validExternalName(svc.Spec.ExternalName) {
			return nil
		}
		port := sp.TargetPort.String()
		if sp.TargetPort.IntValue() == 0 && sp.TargetPort.StrVal == "" {
			port = strconv.Itoa(int(sp.Port))
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return nil // a named target port: ingress-nginx's Lua cannot use it either
		}
		return []model.Endpoint{{Address: svc.Spec.ExternalName, Port: uint16(n)}}
	}
	ess := e.slices
	byName := func(x, y *discoveryv1.EndpointSlice) int { return strings.Compare(x.Name, y.Name) }
	if !slices.IsSortedFunc(ess, byName) {
		// Sorted on a copy: the caller's slice may be a lister's.
		ess = slices.SortedFunc(slices.Values(ess), byName)
	}
	numericTarget := int32(0)
	if sp.TargetPort.Type == intstr.Int {
		numericTarget = sp.TargetPort.IntVal
	}
	n := 0
	for _, es := range ess {
		n += len(es.Endpoints) * max(1, len(es.Ports))
	}
	out := endpointSet{list: make([]model.Endpoint, 0, n)}
	var portBuf [4]int32 // a slice's ports, on the stack for most
	ports := portBuf[:0]
	for _, es := range ess {
		if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		ports = ports[:0]
		if len(es.Ports) == 0 && numericTarget > 0 {
			ports = append(ports, numericTarget)
		}
		for _, p := range es.Ports {
			if p.Protocol != nil && *p.Protocol != proto {
				continue
			}
			port := int32(0)
			if p.Port != nil && (sp.Name == "" || ptrStr(p.Name) == sp.Name) {
				port = *p.Port
			}
			if port == 0 {
				port = numericTarget
			}
			if port > 0 {
				ports = append(ports, port)
			}
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, port := range ports {
				for _, addr := range ep.Addresses {
					if b.validAddress(es, addr) {
						out.add(model.Endpoint{Address: addr, Port: uint16(port)})
					}
				}
			}
		}
	}
	if len(out.list) == 0 {
		return nil
	}
	return out.list
}

// endpointSet is a list of endpoints without duplicates (same address and
// port), in the order they were added. The few endpoints of most backends
// are scanned; a map takes over past linearScanMax.
type endpointSet struct {
	list  []model.Endpoint
	index map[model.Endpoint]struct{} // nil until list is long
}

const linearScanMax = 16

func (s *endpointSet) add(e model.Endpoint) {
	if s.index != nil {
		if _, ok := s.index[e]; ok {
			return
		}
		s.index[e] = struct{}{}
	} else if slices.Contains(s.list, e) {
		return
	}
	s.list = append(s.list, e)
	if s.index == nil && len(s.list) > linearScanMax {
		s.index = make(map[model.Endpoint]struct{}, 2*len(s.list))
		for _, e := range s.list {
			s.index[e] = struct{}{}
		}
	}
}

// validAddress reports whether addr is an IP address of the slice's type
// (no zone). The API server validates addresses, but
// --manifests and older servers do not, and a bad one must not reach a data
// plane: nginx would refuse the whole configuration that carried it. A bad
// address is skipped, once reported on its EndpointSlice; the rest serve.
func (b *builder) validAddress(es *discoveryv1.EndpointSlice, addr string) bool {
	ip, err := netip.ParseAddr(addr) // refuses IPv4 octets with leading zeros
	ok := err == nil && ip.Zone() == "" && (es.AddressType == discoveryv1.AddressTypeIPv4) == ip.Is4()
	if ok {
		return true
	}
	key := es.Namespace + "/" + es.Name + "/" + addr
	if b.badAddrs[key] {
		return false
	}
	if b.badAddrs == nil {
		b.badAddrs = map[string]bool{}
	}
	b.badAddrs[key] = true
	b.cfg.Errors = append(b.cfg.Errors, model.ObjectError{
		Object:  model.ObjectRef{Kind: "EndpointSlice", Namespace: es.Namespace, Name: es.Name, UID: string(es.UID)},
		Field:   "endpoints.addresses",
		Message: fmt.Sprintf("address %q is not an %s address; this endpoint is skipped", addr, es.AddressType),
	})
	return false
}

// l4Protocol is the EndpointSlice protocol of a tcp- or udp-services entry.
func l4Protocol(proto string) corev1.Protocol {
	if proto == "udp" {
		return corev1.ProtocolUDP
	}
	return corev1.ProtocolTCP
}

// isLoopback reports whether an ExternalName points at this host: such
// services are refused (ingress-nginx does the same), since they would let an
// Ingress reach the data plane's own local ports.
func isLoopback(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

func ptrStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// affinityFor applies session affinity from one path: type and mode from the
// first path that sets them; cookie fields overwritten by every path with
// affinity, and the path appended to locations[host] and to the locations of
// each server alias (ingress-nginx, §1.4).
func (b *builder) affinityFor(be *model.Backend, a *annotations, host, path string) {
	if a.affinity != "cookie" {
		return
	}
	ca := a.cookie
	ca.Persistent = a.affinityMode == "persistent"
	var locs map[string][]string
	if be.Affinity != nil {
		ca.Persistent, locs = be.Affinity.Persistent, be.Affinity.Locations
	}
	if locs == nil {
		locs = map[string][]string{}
	}
	locs[host] = append(locs[host], path)
	if host != model.CatchAllHost {
		for _, alias := range a.serverAliases {
			locs[alias] = append(locs[alias], path)
		}
	}
	ca.Locations = locs
	be.Affinity = &ca
}

// mergeCanaries adds each canary Ingress's backends as alternative backends
// of the primaries serving the same host, path and path type (ingress-nginx
// mergeAlternativeBackends). A canary matching nothing is dropped.
func (b *builder) mergeCanaries(canaries []*networkingv1.Ingress) {
	for _, ing := range canaries {
		a := b.canaryAnns[ing]
		ref := model.ObjectRef{Kind: "Ingress", Namespace: ing.Namespace, Name: ing.Name, UID: string(ing.UID)}
		rules := ing.Spec.Rules
		if d := ing.Spec.DefaultBackend; d != nil {
			// A canary's default backend merges into the catch-all server's
			// "/" (ingress-nginx, spec §1.4).
			rules = append(append([]networkingv1.IngressRule(nil), rules...), networkingv1.IngressRule{
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{
					{Path: "/", PathType: ptr(networkingv1.PathTypePrefix), Backend: *d}}}}})
		}
		for ri, rule := range rules {
			host := rule.Host
			if host == "" {
				host = model.CatchAllHost
			}
			srv := b.servers[host]
			if rule.HTTP == nil {
				continue
			}
			if srv == nil {
				b.objErr(ing, fmt.Sprintf("spec.rules[%d].host", ri), fmt.Sprintf("canary for host %s, which no primary Ingress serves; not used there", host))
				continue
			}
			for pi, p := range rule.HTTP.Paths {
				field := pathField{rule: ri, path: pi}
				if ri >= len(ing.Spec.Rules) {
					field = defaultBackendField
				}
				loc, ok := b.location(ing, ref, a, host, p, field)
				if !ok {
					continue
				}
				i := findLocation(srv, loc.Path, loc.PathType)
				if i < 0 || srv.Locations[i].IsDefaultBackend {
					if ri < len(ing.Spec.Rules) {
						b.objErr(ing, field.String(), fmt.Sprintf("canary for %s %q on host %s, which no primary Ingress serves; not used there", loc.PathType, loc.Path, host))
					}
					continue
				}
				primary := b.backends[srv.Locations[i].Backend]
				canary := b.backends[loc.Backend]
				if primary == nil || canary == nil || primary.NoServer || primary.Name == canary.Name {
					continue
				}
				if !contains(primary.Alternatives, canary.Name) {
					primary.Alternatives = append(primary.Alternatives, canary.Name)
				}
				if !a.affinityCanaryLegacy {
					canary.Affinity = copyAffinity(primary.Affinity)
				}
			}
		}
	}
	// Drop canaries no primary refers to.
	used := map[string]bool{}
	for _, be := range b.backends {
		for _, alt := range be.Alternatives {
			used[alt] = true
		}
	}
	for name, be := range b.backends {
		if be.NoServer && !used[name] {
			delete(b.backends, name)
		}
	}
}

func copyAffinity(ca *model.CookieAffinity) *model.CookieAffinity {
	if ca == nil {
		return nil
	}
	out := *ca
	if ca.Locations != nil {
		out.Locations = map[string][]string{}
		for k, v := range ca.Locations {
			out.Locations[k] = append([]string(nil), v...)
		}
	}
	return &out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// tls loads the certificates an Ingress names and returns host → cert UID.
func (b *builder) tls(ing *networkingv1.Ingress) map[string]string {
	if len(ing.Spec.TLS) == 0 {
		return nil
	}
	out := map[string]string{}
	for i, t := range ing.Spec.TLS {
		field := fmt.Sprintf("spec.tls[%d].secretName", i)
		sec := b.secrets[ing.Namespace+"/"+t.SecretName]
		if sec == nil {
			b.objErr(ing, field, fmt.Sprintf("Secret %s/%s does not exist; TLS is not served for %v", ing.Namespace, t.SecretName, t.Hosts))
			continue
		}
		cert, err := certificate(sec)
		if err != nil {
			b.objErr(ing, field, err.Error())
			continue
		}
		b.cfg.Certificates[cert.UID] = cert
		for _, h := range t.Hosts {
			out[h] = cert.UID
		}
	}
	return out
}

// certificate validates a kubernetes.io/tls Secret.
func certificate(sec *corev1.Secret) (model.Certificate, error) {
	crt, key := sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return model.Certificate{}, fmt.Errorf("secret %s/%s: invalid certificate or key: %v", sec.Namespace, sec.Name, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return model.Certificate{}, fmt.Errorf("secret %s/%s: %v", sec.Namespace, sec.Name, err)
	}
	pemText := strings.TrimRight(string(crt), "\n") + "\n" + strings.TrimRight(string(key), "\n") + "\n"
	if blk, _ := pem.Decode(key); blk == nil {
		return model.Certificate{}, fmt.Errorf("secret %s/%s: key is not PEM", sec.Namespace, sec.Name)
	}
	uid := string(sec.UID)
	if uid == "" {
		uid = sec.Namespace + "/" + sec.Name
	}
	return model.Certificate{
		UID: uid, Secret: model.ObjectRef{Kind: "Secret", Namespace: sec.Namespace, Name: sec.Name, UID: string(sec.UID)},
		PEM: pemText, Hosts: leaf.DNSNames, NotAfter: leaf.NotAfter.Unix(),
	}, nil
}

// defaultCertificate loads --default-ssl-certificate.
func (b *builder) defaultCertificate() {
	if b.opt.DefaultSSLCertificate == "" {
		return
	}
	ns, name, _ := strings.Cut(b.opt.DefaultSSLCertificate, "/")
	ref := model.ObjectRef{Kind: "Secret", Namespace: ns, Name: name}
	sec := b.secrets[ns+"/"+name]
	if sec == nil {
		b.cfg.Errors = append(b.cfg.Errors, model.ObjectError{Object: ref, Field: "--default-ssl-certificate",
			Message: "the default SSL certificate Secret does not exist; a self-signed certificate is served"})
		return
	}
	cert, err := certificate(sec)
	if err != nil {
		ref.UID = string(sec.UID)
		b.cfg.Errors = append(b.cfg.Errors, model.ObjectError{Object: ref, Field: "--default-ssl-certificate",
			Message: err.Error() + "; a self-signed certificate is served"})
		return
	}
	b.cfg.Certificates[cert.UID] = cert
	b.cfg.DefaultCertificate = cert.UID
}

// passthrough lists the ssl-passthrough hosts with the backend of their
// "/" location (or their first one).
func (b *builder) passthrough() {
	for _, srv := range b.servers {
		if !srv.SSLPassthrough || len(srv.Locations) == 0 {
			continue
		}
		backend := srv.Locations[0].Backend
		if i := findLocation(srv, "/", model.PathTypePrefix); i >= 0 {
			backend = srv.Locations[i].Backend
		}
		if be := b.backends[backend]; be != nil {
			be.SSLPassthrough = true
		}
		b.cfg.PassthroughBackends = append(b.cfg.PassthroughBackends, model.PassthroughBackend{Hostname: srv.Hostname, Backend: backend})
	}
	sort.Slice(b.cfg.PassthroughBackends, func(i, j int) bool {
		return b.cfg.PassthroughBackends[i].Hostname < b.cfg.PassthroughBackends[j].Hostname
	})
}

// l4 reads a tcp-services or udp-services ConfigMap:
// "<listen port>": "<namespace>/<service>:<port>[:PROXY][:PROXY]", the first
// PROXY decoding the PROXY protocol from clients, the second sending it
// upstream (ingress-nginx's format).
func (b *builder) l4(cm *corev1.ConfigMap, proto string) []model.L4Service {
	if cm == nil {
		return nil
	}
	ref := model.ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name, UID: string(cm.UID)}
	bad := func(key, msg string) {
		b.cfg.Errors = append(b.cfg.Errors, model.ObjectError{Object: ref, Field: key, Message: msg + "; the entry is ignored"})
	}
	var out []model.L4Service
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		val := cm.Data[key]
		listen, err := strconv.Atoi(key)
		if err != nil || listen < 1 || listen > 65535 {
			bad(key, fmt.Sprintf("%q is not a port", key))
			continue
		}
		parts := strings.Split(val, ":")
		if len(parts) < 2 || len(parts) > 4 {
			bad(key, fmt.Sprintf("%q is not namespace/service:port[:PROXY][:PROXY]", val))
			continue
		}
		ns, name, ok := strings.Cut(parts[0], "/")
		if !ok || !reLabel.MatchString(name) || !reLabel.MatchString(ns) {
			bad(key, fmt.Sprintf("%q does not name a namespace/service", parts[0]))
			continue
		}
		okFlags := true
		for _, f := range parts[2:] {
			okFlags = okFlags && (f == "PROXY" || f == "")
		}
		if !okFlags {
			bad(key, fmt.Sprintf("%q: only PROXY may follow the port", val))
			continue
		}
		e := b.services[ns+"/"+name]
		svc := e.service()
		if svc == nil {
			bad(key, fmt.Sprintf("Service %s/%s does not exist", ns, name))
			continue
		}
		var sp *corev1.ServicePort
		for i, p := range svc.Spec.Ports {
			if p.Name == parts[1] || strconv.Itoa(int(p.Port)) == parts[1] {
				sp = &svc.Spec.Ports[i]
				break
			}
		}
		if sp == nil {
			bad(key, fmt.Sprintf("Service %s/%s has no port %s", ns, name, parts[1]))
			continue
		}
		backend := proto + "-" + ns + "-" + name + "-" + parts[1]
		if b.backends[backend] == nil {
			be := &model.Backend{Name: backend, Port: model.ServicePort{Number: int32(listen)}, HasService: true}
			b.fillEndpoints(be, e, sp, l4Protocol(proto))
			if svc.Spec.Type == corev1.ServiceTypeExternalName {
				be.ExternalName = svc.Spec.ExternalName
			}
			b.backends[backend] = be
		}
		out = append(out, model.L4Service{Port: listen, Backend: backend,
			Service: model.ObjectRef{Kind: "Service", Namespace: ns, Name: name, UID: string(svc.UID)}, ServicePort: parts[1],
			DecodeProxyProtocol: len(parts) > 2 && parts[2] == "PROXY", EncodeProxyProtocol: len(parts) > 3 && parts[3] == "PROXY"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// sortLocations sorts a server's locations as ingress-nginx does: by path
// descending and then, stably, by path length descending: longest first,
// equal lengths in descending byte order. Same path: Exact,
// ImplementationSpecific, Prefix. A few locations (most servers) are
// sorted in place by insertion, which is stable and allocates nothing.
func sortLocations(locs []model.Location) {
	before := func(li, lj *model.Location) bool {
		if len(li.Path) != len(lj.Path) {
			return len(li.Path) > len(lj.Path)
		}
		if li.Path != lj.Path {
			return li.Path > lj.Path
		}
		return li.PathType < lj.PathType
	}
	if len(locs) > 16 {
		sort.SliceStable(locs, func(i, j int) bool { return before(&locs[i], &locs[j]) })
		return
	}
	for i := 1; i < len(locs); i++ {
		for j := i; j > 0 && before(&locs[j], &locs[j-1]); j-- {
			locs[j], locs[j-1] = locs[j-1], locs[j]
		}
	}
}

// finish sorts everything so the same input always gives the same bytes.
func (b *builder) finish() {
	b.wwwServers()
	// Names are unique (the map's keys). The Configuration shares each
	// Backend with the ones refreshed from it (EndpointIndex.Refresh), so
	// none is written once finish returns.
	// Both are sorted with their names beside the pointers: reading the
	// name through the pointer in every comparison missed the cache
	// (100k backends at 50k Ingresses).
	backends := make([]named[*model.Backend], 0, len(b.backends))
	for _, be := range b.backends {
		backends = append(backends, named[*model.Backend]{be.Name, be})
	}
	slices.SortFunc(backends, func(x, y named[*model.Backend]) int { return strings.Compare(x.name, y.name) })
	b.cfg.Backends = make([]*model.Backend, len(backends))
	for i, be := range backends {
		b.cfg.Backends[i] = be.v
	}
	servers := make([]named[*model.Server], 0, len(b.servers))
	for _, s := range b.servers {
		for i := range s.Locations {
			s.Locations[i].SetPathRegexp()
		}
		sortLocations(s.Locations)
		servers = append(servers, named[*model.Server]{s.Hostname, s})
	}
	slices.SortFunc(servers, func(x, y named[*model.Server]) int {
		hx, hy := x.name, y.name
		if (hx == model.CatchAllHost) != (hy == model.CatchAllHost) {
			if hx == model.CatchAllHost {
				return -1
			}
			return 1
		}
		return strings.Compare(hx, hy)
	})
	b.cfg.Servers = make([]model.Server, len(servers))
	for i, s := range servers {
		b.cfg.Servers[i] = *s.v
	}
	if len(b.cfg.Certificates) == 0 {
		b.cfg.Certificates = nil
	}
}

// named is a value with its name, to sort by.
type named[T any] struct {
	name string
	v    T
}

// wwwServers adds the redirect server of each host with
// from-to-www-redirect, as ingress-nginx's BuildRedirects: www.<host> for
// <host>, <host> for www.<host>; none where a server of that name exists
// (an Event says so). Its TLS is the host's certificate when that names it
// too.
func (b *builder) wwwServers() {
	hosts := make([]string, 0, len(b.wwwRedirects))
	for h := range b.wwwRedirects {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, to := range hosts {
		from := "www." + to
		if rest, ok := strings.CutPrefix(to, "www."); ok {
			from = rest
		}
		ing := b.wwwRedirects[to]
		if b.servers[from] != nil {
			b.objErr(ing, annotationPrefix+"from-to-www-redirect", fmt.Sprintf("%s is served by an Ingress; no redirect from it to %s", from, to))
			continue
		}
		if validateHost(from) != nil {
			continue
		}
		srv := &model.Server{Hostname: from, RedirectTo: to}
		if t := b.servers[to].TLS; t != nil {
			if c, ok := b.cfg.Certificates[t.CertificateUID]; ok && certNames(c.Hosts, from) {
				srv.TLS = &model.ServerTLS{CertificateUID: t.CertificateUID}
			}
		}
		b.servers[from] = srv
	}
}

// certNames reports whether a certificate for names is valid for host (a
// "*." name covers one label).
func certNames(names []string, host string) bool {
	for _, n := range names {
		if n == host {
			return true
		}
		if suffix, ok := strings.CutPrefix(n, "*"); ok && strings.HasSuffix(host, suffix) && !strings.Contains(host[:len(host)-len(suffix)], ".") && len(host) > len(suffix) {
			return true
		}
	}
	return false
}
