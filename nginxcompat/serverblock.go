package nginxcompat

import (
	"bytes"
	"strconv"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// writeServer appends one server block, exactly as the template's server
// section used to render it, without text/template's reflection: at 10,000
// servers this part was most of the render time. Every value was validated
// by serverView/locationView; strings are quoted with quote, as {{q}} did.
func writeServer(b *bytes.Buffer, v *view, sv *serverV) {
	b.WriteString("\n    server {\n        server_name ")
	for _, n := range sv.Names {
		b.WriteByte(' ')
		b.WriteString(quote(n))
	}
	b.WriteByte(';')
	for _, l := range v.HTTPListens {
		b.WriteString("\n        listen ")
		b.WriteString(l)
		if v.G.ProxyProtocol {
			b.WriteString(" proxy_protocol") // use-proxy-protocol
		}
		if sv.Default {
			b.WriteString(" default_server")
		}
		b.WriteByte(';')
	}
	if sv.TLS != "" {
		for _, l := range v.HTTPSListens {
			b.WriteString("\n        listen ")
			b.WriteString(l)
			if v.ProxyProtocol || v.G.ProxyProtocol {
				b.WriteString(" proxy_protocol")
			}
			b.WriteString(" ssl http2")
			if sv.Default {
				b.WriteString(" default_server")
			}
			b.WriteByte(';')
		}
		b.WriteString("\n        ssl_certificate ")
		b.WriteString(quote(sv.TLS))
		b.WriteString(";\n        ssl_certificate_key ")
		b.WriteString(quote(sv.TLS))
		b.WriteByte(';')
		if sv.ClientAuth != nil {
			writeClientAuth(b, sv.ClientAuth)
		}
		if sv.OwnTLS && v.G.HSTS {
			// The server also answers plain HTTP: $hsts_header is
			// empty there (nginx.tmpl). A server on the default
			// certificate sends none, as on the Go plane.
			b.WriteString("\n        add_header Strict-Transport-Security $hsts_header always;")
		}
	}
	b.WriteByte('\n')
	// custom-http-errors: one named location per error backend and code,
	// numbered per server (backend names never reach a location name).
	var errBackends []string
	type errPage struct{ slot, code int }
	var pages []errPage
	seen := map[errPage]bool{}
	for _, l := range sv.Locations {
		if len(l.CustomErrors) == 0 {
			continue
		}
		l.ErrorSlot = -1
		for i, eb := range errBackends {
			if eb == l.ErrorBackend {
				l.ErrorSlot = i
			}
		}
		if l.ErrorSlot < 0 {
			l.ErrorSlot = len(errBackends)
			errBackends = append(errBackends, l.ErrorBackend)
		}
		for _, c := range l.CustomErrors {
			if p := (errPage{l.ErrorSlot, c}); !seen[p] {
				seen[p] = true
				pages = append(pages, p)
			}
		}
	}
	// A location adding fields of its own repeats the server's
	// Strict-Transport-Security: nginx inherits add_header only into a
	// level that has none.
	hsts := ""
	if sv.OwnTLS && v.G.HSTS {
		hsts = v.HSTSValue
	}
	// The mirrors' internal locations first, once per Source, as
	// ingress-nginx writes them ahead of the locations.
	mirrors := map[string]bool{}
	for _, l := range sv.Locations {
		if l.Mirror != nil && !l.Denied && !mirrors[l.Mirror.Source] {
			mirrors[l.Mirror.Source] = true
			writeMirrorLocation(b, l.Mirror)
		}
	}
	written := map[*authV]bool{}
	digests := map[string]bool{}
	for _, l := range sv.Locations {
		if l.Auth != nil && !written[l.Auth] {
			// Once per auth: a Prefix path's two locations share it.
			written[l.Auth] = true
			writeAuthLocations(b, v, l, hsts)
		}
		if l.DigestKey != "" && !l.Denied && !digests[l.DigestKey] {
			digests[l.DigestKey] = true
			writeDigestLocation(b, v.DigestSocket, l.DigestKey)
		}
		writeLocation(b, v, l, hsts)
	}
	for _, p := range pages {
		writeErrorLocation(b, errBackends[p.slot], p.slot, p.code)
	}
	b.WriteString("\n    }\n")
}

// writeErrorLocation is ingress-nginx's @custom_<backend>_<code> location:
// the default backend answers in place of the upstream's error, told the
// code and the original request in X-* headers.
func writeErrorLocation(b *bytes.Buffer, backend string, slot, code int) {
	b.WriteString("\n        location @custom_")
	writeInt(b, slot)
	b.WriteByte('_')
	writeInt(b, code)
	b.WriteString(" {\n            internal;\n            set $proxy_upstream_name ")
	b.WriteString(quote(backend))
	b.WriteString(";\n            set $proxy_alternative_upstream_name \"\";\n            set $balancer_ewma_score -1;")
	b.WriteString("\n            rewrite_by_lua_block {\n                balancer.rewrite()\n            }\n            log_by_lua_block {\n                balancer.log()\n            }")
	b.WriteString("\n            proxy_intercept_errors off;\n            proxy_http_version 1.1;\n            proxy_set_header X-Code ")
	writeInt(b, code)
	b.WriteString(";\n            proxy_set_header X-Format $http_accept;\n            proxy_set_header X-Original-URI $request_uri;\n            proxy_set_header X-Namespace $namespace;\n            proxy_set_header X-Ingress-Name $ingress_name;\n            proxy_set_header X-Service-Name $service_name;\n            proxy_set_header X-Request-ID $req_id;\n            proxy_set_header Host $best_http_host;\n            rewrite (.*) / break;\n            proxy_pass http://upstream_balancer;\n        }")
}

func writeInt(b *bytes.Buffer, n int) {
	var tmp [20]byte
	b.Write(strconv.AppendInt(tmp[:0], int64(n), 10))
}

func writeLocation(b *bytes.Buffer, v *view, l *locationV, hsts string) {
	if l.WWWRedirect != "" {
		// As ingress-nginx's redirect servers (its Lua builds the same
		// scheme://host:port and URI without one trailing slash).
		b.WriteString("\n        location / {\n            return ")
		writeInt(b, v.G.HTTPRedirectCode)
		b.WriteString(" $pass_access_scheme://")
		b.WriteString(l.WWWRedirect)
		b.WriteString(":$pass_server_port$redirect_uri_no_slash;\n        }")
		return
	}
	b.WriteString("\n        location ")
	b.WriteString(l.Modifier)
	b.WriteString(quote(l.Path))
	b.WriteString(" {\n            set $namespace ")
	b.WriteString(quote(l.Namespace))
	b.WriteString(";\n            set $ingress_name ")
	b.WriteString(quote(l.IngressName))
	b.WriteString(";\n            set $service_name ")
	b.WriteString(quote(l.Service))
	if v.G.LogServicePort {
		b.WriteString(";\n            set $service_port ")
		b.WriteString(quote(l.ServicePort))
	}
	b.WriteString(";\n            set $proxy_upstream_name ")
	b.WriteString(quote(l.Backend))
	b.WriteString(";\n            set $proxy_alternative_upstream_name \"\";\n            set $balancer_ewma_score -1;\n            set $location_path ")
	lp := l.LocationPath
	if lp == "" {
		lp = l.Path
	}
	b.WriteString(quote(escapeDollar(lp)))
	b.WriteByte(';')
	if l.NoAccessLog || (l.Backend == model.DefaultBackendName && !v.G.AccessLogDefaultBackend) {
		b.WriteString("\n            access_log off;")
	}
	if l.Denied {
		b.WriteString("\n            return 503;\n        }")
		return
	}
	if rl := l.RateLimit; rl != nil && rl.Conns > 0 {
		b.WriteString("\n            limit_conn ")
		b.WriteString(rl.ID)
		b.WriteString("_conn ")
		writeInt(b, rl.Conns)
		b.WriteByte(';')
	}
	if rl := l.RateLimit; rl != nil {
		// ingress-nginx's order: connections, requests per second, then
		// per minute.
		for _, z := range []struct {
			suffix string
			rate   int
			burst  int
		}{{"_rps", rl.RPS, rl.BurstRPS}, {"_rpm", rl.RPM, rl.BurstRPM}} {
			if z.rate == 0 {
				continue
			}
			b.WriteString("\n            limit_req zone=")
			b.WriteString(rl.ID)
			b.WriteString(z.suffix)
			if z.burst > 0 {
				// nginx refuses "burst=0"; without burst= it is 0.
				b.WriteString(" burst=")
				writeInt(b, z.burst)
			}
			b.WriteString(" nodelay;")
		}
	}
	if l.LimitRateAfter > 0 {
		b.WriteString("\n            limit_rate_after ")
		writeInt(b, l.LimitRateAfter)
		b.WriteString("k;")
	}
	if l.LimitRate > 0 {
		b.WriteString("\n            limit_rate ")
		writeInt(b, l.LimitRate)
		b.WriteString("k;")
	}
	for _, d := range l.Deny {
		b.WriteString("\n            deny ")
		b.WriteString(d)
		b.WriteByte(';')
	}
	for _, a := range l.Allow {
		b.WriteString("\n            allow ")
		b.WriteString(a)
		b.WriteByte(';')
	}
	if len(l.Allow) > 0 {
		b.WriteString("\n            deny all;")
	}
	if l.BasicFile != "" {
		b.WriteString("\n            auth_basic ")
		b.WriteString(quote(l.BasicRealm))
		b.WriteString(";\n            auth_basic_user_file ")
		b.WriteString(quote(l.BasicFile))
		b.WriteByte(';')
	}
	if l.Auth != nil {
		writeAuthRequest(b, l.Auth)
	}
	if l.DigestKey != "" {
		writeDigestRequest(b, l.DigestKey)
	}
	if l.BasicFile != "" || l.DigestKey != "" {
		// As ingress-nginx: the credentials stay with the proxy.
		b.WriteString("\n            proxy_set_header Authorization \"\";")
	}
	if l.SSLRedirect {
		b.WriteString("\n            if ($scheme = http) {\n                return ")
		writeInt(b, v.G.HTTPRedirectCode)
		if l.PreserveTrailingSlash {
			b.WriteString(" https://$host$request_uri;\n            }")
		} else {
			b.WriteString(" https://$host$redirect_uri_no_slash;\n            }")
		}
	}
	if l.ClientAuth != nil {
		writeClientAuthHeaders(b, l.ClientAuth)
	}
	if l.AppRoot != "" {
		b.WriteString("\n            if ($uri = /) {\n                return 302 ")
		b.WriteString(quote("$scheme://$http_host" + l.AppRoot))
		b.WriteString(";\n            }")
	}
	if l.RedirectURL != "" {
		b.WriteString("\n            return ")
		writeInt(b, l.RedirectCode)
		b.WriteByte(' ')
		b.WriteString(quote(l.RedirectURL))
		b.WriteByte(';')
	}
	if l.CORS != nil {
		writeCORS(b, l.CORS, hsts)
	}
	for _, h := range l.Headers {
		// more_set_headers replaces the upstream's field; nginx's
		// add_header would add a second one.
		b.WriteString("\n            proxy_hide_header ")
		b.WriteString(h.Name)
		b.WriteString(";\n            add_header ")
		b.WriteString(h.Name)
		b.WriteByte(' ')
		b.WriteString(quote(h.Value))
		b.WriteByte(';')
	}
	if l.Auth != nil || l.DigestKey != "" || l.CORS != nil || len(l.Headers) > 0 {
		writeHSTS(b, "\n            ", hsts)
	}
	if l.Mirror != nil {
		writeMirror(b, l.Mirror)
	}
	b.WriteString("\n\n            rewrite_by_lua_block {\n                balancer.rewrite()\n            }\n            log_by_lua_block {\n                balancer.log()\n            }\n\n            client_max_body_size ")
	b.WriteString(l.BodySize)
	b.WriteString(";\n            proxy_connect_timeout ")
	writeInt(b, l.ConnectTimeout)
	b.WriteString("s;\n            proxy_send_timeout ")
	writeInt(b, l.SendTimeout)
	b.WriteString("s;\n            proxy_read_timeout ")
	writeInt(b, l.ReadTimeout)
	b.WriteString("s;\n            proxy_buffering ")
	b.WriteString(onoff(l.Buffering))
	b.WriteString(";\n            proxy_request_buffering ")
	b.WriteString(onoff(l.RequestBuffering))
	b.WriteString(";\n            client_body_buffer_size ")
	writeInt(b, l.ClientBodyBuffer)
	b.WriteString(";\n            proxy_buffer_size ")
	writeInt(b, l.BufferSize)
	b.WriteString(";\n            proxy_buffers ")
	writeInt(b, l.BuffersNumber)
	b.WriteByte(' ')
	writeInt(b, l.BufferSize)
	b.WriteString(";\n            proxy_next_upstream ")
	b.WriteString(l.NextUpstream)
	b.WriteString(";\n            proxy_next_upstream_tries ")
	writeInt(b, l.NextUpstreamTries)
	b.WriteString(";\n            proxy_next_upstream_timeout ")
	writeInt(b, l.NextUpstreamTimeout)
	b.WriteString("s;\n            proxy_http_version ")
	if l.HTTP10 {
		b.WriteString("1.0") // proxy-http-version
	} else {
		b.WriteString("1.1")
	}
	b.WriteString(";\n            proxy_set_header Host ")
	if l.UpstreamVhost != "" {
		b.WriteString(quote(l.UpstreamVhost))
	} else {
		b.WriteString("$best_http_host")
	}
	b.WriteString(";\n            proxy_set_header Upgrade $http_upgrade;\n            proxy_set_header Connection $connection_upgrade;\n            proxy_set_header X-Request-ID $req_id;\n            proxy_set_header X-Real-IP $remote_addr;\n            proxy_set_header X-Forwarded-For $full_x_forwarded_for;\n            proxy_set_header X-Forwarded-Host $best_http_host;\n            proxy_set_header X-Forwarded-Port $pass_server_port;\n            proxy_set_header X-Forwarded-Proto $pass_access_scheme;\n            proxy_set_header X-Forwarded-Scheme $pass_access_scheme;\n            proxy_set_header X-Scheme $pass_access_scheme;")
	if l.XForwardedPrefix != "" {
		b.WriteString("\n            proxy_set_header X-Forwarded-Prefix ")
		b.WriteString(quote(l.XForwardedPrefix))
		b.WriteByte(';')
	}
	for _, h := range l.SetHeaders {
		b.WriteString("\n            proxy_set_header ")
		b.WriteString(h.Name)
		b.WriteByte(' ')
		b.WriteString(quote(h.Value))
		b.WriteByte(';')
	}
	if l.RewriteTarget != "" {
		b.WriteString("\n            rewrite ")
		b.WriteString(quote(l.RewriteRegex))
		b.WriteByte(' ')
		b.WriteString(quote(l.RewriteTarget))
		b.WriteString(" break;")
	}
	if len(l.CustomErrors) > 0 {
		b.WriteString("\n            proxy_intercept_errors on;")
		for _, c := range l.CustomErrors {
			b.WriteString("\n            error_page ")
			writeInt(b, c)
			b.WriteString(" = @custom_")
			writeInt(b, l.ErrorSlot)
			b.WriteByte('_')
			writeInt(b, c)
			b.WriteByte(';')
		}
	}
	if l.ProxySSL != nil {
		writeProxySSL(b, l.ProxySSL)
	}
	if l.GRPC {
		b.WriteString("\n            grpc_pass ")
	} else {
		b.WriteString("\n            proxy_pass ")
	}
	b.WriteString(l.Scheme)
	b.WriteString("://")
	if l.ProxySSL != nil {
		b.WriteString(l.ProxySSL.Upstream)
	} else {
		b.WriteString("upstream_balancer")
	}
	b.WriteString(";\n        }")
}

// writeCORS writes enable-cors as ingress-nginx's CORS template does: an
// allowed Origin gets the Access-Control-* fields on every answer, and its
// preflight (OPTIONS) is answered here with 204; any other Origin gets none
// of them, and its OPTIONS goes upstream. add_header leaves out a field whose
// value is empty, so each field's value is a variable, set only once the
// Origin is allowed. hsts is for the preflight's own add_header lines
// (writeHSTS).
func writeCORS(b *bytes.Buffer, c *corsV, hsts string) {
	type field struct{ name, variable, value string }
	fields := []field{{"Access-Control-Allow-Origin", "$cors_origin", "$http_origin"}}
	if c.AnyOrigin {
		fields[0].value = `"*"`
	}
	if c.Credentials {
		fields = append(fields, field{"Access-Control-Allow-Credentials", "$cors_credentials", "true"})
	}
	fields = append(fields, field{"Access-Control-Allow-Methods", "$cors_methods", quote(c.Methods)},
		field{"Access-Control-Allow-Headers", "$cors_headers", quote(c.Headers)})
	if c.Expose != "" {
		fields = append(fields, field{"Access-Control-Expose-Headers", "$cors_expose", quote(c.Expose)})
	}
	fields = append(fields, field{"Access-Control-Max-Age", "$cors_max_age", strconv.Itoa(c.MaxAge)})
	indent := "\n            "
	if !c.AnyOrigin {
		b.WriteString("\n            set $cors \"\";")
		for _, f := range fields {
			b.WriteString("\n            set ")
			b.WriteString(f.variable)
			b.WriteString(" \"\";")
		}
		// buildCorsOriginRegex: $cors is "true" only for an allowed Origin.
		b.WriteString("\n            if ($http_origin ~* ")
		b.WriteString(quote(c.OriginRegex))
		b.WriteString(" ) {")
		indent = "\n                "
	}
	b.WriteString(indent)
	b.WriteString("set $cors true;")
	for _, f := range fields {
		b.WriteString(indent)
		b.WriteString("set ")
		b.WriteString(f.variable)
		b.WriteByte(' ')
		b.WriteString(f.value)
		b.WriteByte(';')
	}
	if !c.AnyOrigin {
		b.WriteString("\n            }")
	}
	headers := func(indent string) {
		for _, f := range fields {
			b.WriteString(indent)
			b.WriteString("add_header ")
			b.WriteString(f.name)
			b.WriteByte(' ')
			b.WriteString(f.variable)
			b.WriteString(" always;")
		}
	}
	// The preflight's Content-Type is ingress-nginx's, semicolon missing.
	b.WriteString("\n            if ($request_method = OPTIONS) {\n                set $cors \"${cors}options\";\n            }\n            if ($cors = trueoptions) {")
	headers("\n                ")
	writeHSTS(b, "\n                ", hsts)
	b.WriteString("\n                add_header Content-Type \"text/plain charset=UTF-8\" always;\n                add_header Content-Length 0 always;\n                return 204;\n            }")
	headers("\n            ")
}

// writeHSTS repeats the server's Strict-Transport-Security (nothing when
// hsts is empty) at a level with add_header lines of its own: nginx inherits
// add_header only into a level that has none, and ingress-nginx sends the
// field on every HTTPS answer (lua_ingress.lua's header phase), none on
// plain HTTP ($hsts_header, nginx.tmpl).
func writeHSTS(b *bytes.Buffer, indent, hsts string) {
	if hsts == "" {
		return
	}
	b.WriteString(indent)
	b.WriteString("add_header Strict-Transport-Security $hsts_header always;")
}
