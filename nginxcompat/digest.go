package nginxcompat

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"

	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// auth-type: digest on the nginx plane. Debian's nginx has no auth_digest
// module, so a digest location asks the process's digestauth.Verifier, the
// one the Go plane uses, through auth_request: an internal location per
// credentials passes the request's Authorization field, $request_uri,
// $request_method and $remote_addr to DigestHandler on a unix socket, and
// the location copies the answer's WWW-Authenticate onto its 401, and its
// Authentication-Info onto the response it lets through.

// reSocketPath is a unix socket path nginx.conf may name in proxy_pass.
var reSocketPath = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)

// DigestKey names a location's digest realm and credentials at the digest
// socket: the hex SHA-256 of both, cut to 32 digits.
func DigestKey(da *model.DigestAuth) string {
	sum := sha256.Sum256([]byte(da.Realm + "\n" + da.Credentials.Digest()))
	return hex.EncodeToString(sum[:16])
}

// writeDigestLocation writes the internal location a digest location's
// auth_request goes to.
func writeDigestLocation(b *bytes.Buffer, socket, key string) {
	b.WriteString("\n        location = /_digest-auth-")
	b.WriteString(key)
	b.WriteString(" {\n            internal;\n            access_log off;\n            proxy_pass_request_body off;\n            proxy_set_header Content-Length \"\";\n            proxy_set_header X-Original-URI $request_uri;\n            proxy_set_header X-Original-Method $request_method;\n            proxy_set_header X-Real-IP $remote_addr;\n            proxy_http_version 1.1;\n            proxy_buffering off;\n            proxy_pass http://unix:")
	b.WriteString(socket)
	b.WriteString(":/digest/")
	b.WriteString(key)
	b.WriteString(";\n        }")
}

// writeDigestRequest writes, inside the protected location, the
// auth_request and the challenge copied onto its 401.
func writeDigestRequest(b *bytes.Buffer, key string) {
	b.WriteString("\n            auth_request /_digest-auth-")
	b.WriteString(key)
	b.WriteString(";\n            auth_request_set $digest_challenge $upstream_http_www_authenticate;\n            add_header WWW-Authenticate $digest_challenge always;\n            auth_request_set $digest_info $upstream_http_authentication_info;\n            add_header Authentication-Info $digest_info always;")
}

// DigestHandler answers the digest locations' auth_request subrequests:
// 200 lets the request through, 401 carries the challenge. It serves only
// the credentials of the Configurations it was given (the latest two, so
// workers draining an older nginx.conf keep working); any other key gets
// 500, which nginx answers 500 (closed).
type DigestHandler struct {
	// immutable
	verifier *digestauth.Verifier

	mu        sync.RWMutex // guards cur and prev
	cur, prev map[string]*model.DigestAuth
}

// NewDigestHandler returns a handler serving no credentials until Update.
func NewDigestHandler(v *digestauth.Verifier) *DigestHandler {
	return &DigestHandler{verifier: v}
}

// Update takes the digest locations of cfg.
func (h *DigestHandler) Update(cfg *model.Configuration) {
	m := map[string]*model.DigestAuth{}
	for i := range cfg.Servers {
		for j := range cfg.Servers[i].Locations {
			if da := cfg.Servers[i].Locations[j].Settings().DigestAuth; da != nil && da.Credentials != nil {
				m[DigestKey(da)] = da
			}
		}
	}
	h.mu.Lock()
	h.prev, h.cur = h.cur, m
	h.mu.Unlock()
}

func (h *DigestHandler) lookup(key string) *model.DigestAuth {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if da := h.cur[key]; da != nil {
		return da
	}
	return h.prev[key]
}

// ServeHTTP answers GET /digest/<key>.
func (h *DigestHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.URL.Path, "/digest/")
	da := h.lookup(key)
	if !ok || da == nil {
		http.Error(w, "unknown digest credentials", http.StatusInternalServerError)
		return
	}
	client, _ := netip.ParseAddr(r.Header.Get("X-Real-IP"))
	a := h.verifier.Check(da.Realm, da.Credentials, digestauth.Request{Method: r.Header.Get("X-Original-Method"),
		URI: r.Header.Get("X-Original-URI"), Authorization: r.Header.Get("Authorization"), Client: client.Unmap()})
	if a.WWWAuthenticate != "" {
		w.Header().Set("WWW-Authenticate", a.WWWAuthenticate)
	}
	if a.Status == 0 {
		w.Header().Set("Authentication-Info", a.AuthenticationInfo)
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(a.Status)
}
