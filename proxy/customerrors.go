package proxy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// builtinDefaultPeer is the endpoint the control plane gives the default
// backend when no --default-backend-service is set: ingress-nginx's
// built-in default server, which the Go data plane answers in-process
// (defaultBackend) instead of dialling.
const builtinDefaultPeer = "127.0.0.1:8181"

// builtinDefault reports whether cfg's default backend is only the
// built-in default server.
func builtinDefault(cfg *model.Configuration) bool {
	for _, b := range cfg.Backends {
		if b.Name == model.DefaultBackendName {
			return len(b.Endpoints) == 1 && b.Endpoints[0].HostPort() == builtinDefaultPeer
		}
	}
	return true
}

// intercepts reports whether the location replaces an upstream answer
// with status code by its error backend's (custom-http-errors: nginx
// proxy_intercept_errors on plus error_page <code>).
func (r *route) intercepts(code int) bool {
	return len(r.loc.CustomHTTPErrors) > 0 && slices.Contains(r.loc.CustomHTTPErrors, code)
}

// errorRequest is what the error backend is told of the client's request.
type errorRequest struct {
	method     string
	host       string // $best_http_host: the Host header as sent
	accept     string
	requestURI string // before rewrite-target ($request_uri)
	requestID  string
	remote     string
}

// errorRequestOf is the error backend's view of ctx's request, whose
// upstream got X-Request-ID id, from the client at remote.
func errorRequestOf(ctx *fasthttp.RequestCtx, id []byte, remote netip.Addr) *errorRequest {
	er := &errorRequest{method: string(ctx.Method()), host: string(ctx.Host()), accept: string(ctx.Request.Header.Peek("Accept")),
		requestURI: string(ctx.RequestURI()), requestID: string(id)}
	if remote.IsValid() {
		er.remote = string(appendNginxAddr(nil, remote))
	}
	return er
}

// customError writes into resp the error backend's answer for code, asked
// as ingress-nginx's @custom_<backend>_<code> location asks it: the
// client's method, the path "/" with the client's query, Host as the client sent it, and X-Code,
// X-Format, X-Original-URI, X-Namespace, X-Ingress-Name, X-Service-Name,
// X-Service-Port and X-Request-ID. The answer is relayed whole, status
// included (error_page <code> = @custom...). The error backend is the
// location's default-backend annotation, else the default backend; the
// built-in default server answers in-process, as does an error backend
// without endpoints.
func (p *Proxy) customError(resp *fasthttp.Response, rt *route, code int, er *errorRequest, view balancer.Request, o *outcome) {
	loc := &rt.loc
	backend := loc.CustomDefaultBackend
	if backend == "" {
		backend = model.DefaultBackendName
		if p.routes.Load().builtinDefault {
			defaultBackendResponse(resp)
			return
		}
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(er.method)
	// The location's "rewrite (.*) / break;" keeps the query ($args).
	if _, query, ok := strings.Cut(er.requestURI, "?"); ok && query != "" {
		req.SetRequestURI("/?" + query)
	} else {
		req.SetRequestURI("/")
	}
	req.URI().SetScheme("http")
	req.Header.SetHost(er.host)
	req.UseHostHeader = true
	h := &req.Header
	h.Set("X-Code", strconv.Itoa(code))
	h.Set("X-Format", er.accept)
	h.Set("X-Original-URI", er.requestURI)
	h.Set("X-Namespace", loc.Ingress.Namespace)
	h.Set("X-Ingress-Name", loc.Ingress.Name)
	h.Set("X-Service-Name", loc.Service)
	h.Set("X-Service-Port", loc.ServicePort)
	h.Set("X-Request-ID", er.requestID)
	h.Set("X-Forwarded-For", er.remote)
	t := &fastTry{p: p, out: outbound{req: req}, resp: resp, lim: &limitReader{left: -1}}
	var a balancer.Attempt
	pick, err := p.attempts(backend, rt.errorLoc, view, &a, o, replayOf(er.method, true), t)
	if err != nil {
		if err == balancer.ErrUnknownBackend {
			defaultBackendResponse(resp)
			return
		}
		s := failureStatus(err)
		resp.SetStatusCode(s)
		resp.Header.SetContentType("text/plain; charset=utf-8")
		resp.SetBodyString(statusText(s))
		return
	}
	o.upstreamLength = resp.Header.ContentLength()
	stripHopHeaders(&resp.Header, true, nil)
	if pick.SetCookie != "" {
		resp.Header.Add("Set-Cookie", pick.SetCookie)
	}
}
