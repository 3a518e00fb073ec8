package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

func lit(s string) model.URLPart                { return model.URLPart{Literal: s} }
func vr(v model.URLVar) model.URLPart           { return model.URLPart{Var: v} }
func tmpl(p ...model.URLPart) model.URLTemplate { return p }

func TestExternalAuthAnnotations(t *testing.T) {
	const rdBack = "$pass_access_scheme://$http_host$escaped_request_uri"
	back := []model.URLPart{vr(model.VarPassAccessScheme), lit("://"), vr(model.VarHTTPHost), vr(model.VarEscapedRequestURI)}
	tests := []struct {
		name string
		ann  map[string]string
		want *model.ExternalAuth
	}{
		{
			name: "oauth2-proxy in the cluster",
			ann: map[string]string{"auth-url": "http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth",
				"auth-signin": "https://$host/oauth2/start?rd=$escaped_request_uri", "auth-response-headers": "X-Auth-Request-User, X-Auth-Request-Email,"},
			want: &model.ExternalAuth{
				URL:             tmpl(lit("http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth")),
				Host:            tmpl(lit("oauth2-proxy.auth.svc.cluster.local")),
				SigninURL:       tmpl(lit("https://"), vr(model.VarHost), lit("/oauth2/start?rd="), vr(model.VarEscapedRequestURI)),
				ResponseHeaders: []string{"X-Auth-Request-User", "X-Auth-Request-Email"},
			},
		},
		{
			name: "variables in the auth host; signin without a query gets ?rd=",
			ann: map[string]string{"auth-url": "https://${host}/oauth2/auth", "auth-signin": "https://auth.example.com/start",
				"auth-method": "POST", "auth-request-redirect": "/after", "auth-always-set-cookie": "true"},
			want: &model.ExternalAuth{
				URL:             tmpl(lit("https://"), vr(model.VarHost), lit("/oauth2/auth")),
				Host:            tmpl(vr(model.VarHost)),
				SigninURL:       append(tmpl(lit("https://auth.example.com/start?rd=")), back...),
				Method:          "POST",
				RequestRedirect: "/after",
				AlwaysSetCookie: true,
			},
		},
		{
			name: "a query without the parameter gets &<param>=; IPv6 host without port",
			ann: map[string]string{"auth-url": "http://[fd00::1]:8080/check", "auth-signin": "https://a.example.com/s?x=1",
				"auth-signin-redirect-param": "next"},
			want: &model.ExternalAuth{
				URL:       tmpl(lit("http://[fd00::1]:8080/check")),
				Host:      tmpl(lit("fd00::1")),
				SigninURL: append(tmpl(lit("https://a.example.com/s?x=1&next=")), back...),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := map[string]string{}
			for k, v := range tt.ann {
				raw[annotationPrefix+k] = v
			}
			a, errs := parseAnnotations(raw)
			if len(errs) != 0 || a.denied != nil {
				t.Fatalf("errors %+v, denied %+v", errs, a.denied)
			}
			if diff := cmp.Diff(tt.want, a.externalAuth); diff != "" {
				t.Errorf("ExternalAuth (-want +got):\n%s", diff)
			}
		})
	}
	if got := signinURL("https://a/s?rd=x", ""); got != "https://a/s?rd=x" {
		t.Errorf("signin with rd kept: %q", got)
	}
	if got := signinURL("https://a/s", ""); got != "https://a/s?rd="+rdBack {
		t.Errorf("signin: %q", got)
	}
}

// With auth-url, an invalid value of any kin fails the Ingress closed.
func TestExternalAuthInvalidKinFailsClosed(t *testing.T) {
	for k, v := range map[string]string{
		"auth-method": "FETCH", "auth-signin": "javascript:alert(1)", "auth-signin-redirect-param": "r d",
		"auth-response-headers": "X-A;B", "auth-request-redirect": "/a b", "auth-always-set-cookie": "maybe",
	} {
		t.Run(k, func(t *testing.T) {
			a, errs := parseAnnotations(map[string]string{annotationPrefix + "auth-url": "http://auth.example.com/", annotationPrefix + k: v})
			if a.denied == nil || a.denied.Field != annotationPrefix+k || len(errs) != 1 || errs[0].reason != model.ReasonFailedClosed {
				t.Errorf("denied %+v, errors %+v; want denied by %s", a.denied, errs, k)
			}
		})
	}
}

// auth-tls-*: with auth-tls-secret, an invalid kin fails the Ingress closed
// (auth-tls-match-cn is the field of CVE-2025-1097).
func TestClientAuthInvalidKinFailsClosed(t *testing.T) {
	for k, v := range map[string]string{
		"auth-tls-verify-client": "sometimes", "auth-tls-verify-depth": "deep", "auth-tls-error-page": "javascript:alert(1)",
		"auth-tls-pass-certificate-to-upstream": "maybe", "auth-tls-match-cn": `CN=a"; return 200; "`,
	} {
		t.Run(k, func(t *testing.T) {
			a, errs := parseAnnotations(map[string]string{annotationPrefix + "auth-tls-secret": "ns/ca", annotationPrefix + k: v})
			if a.denied == nil || a.denied.Field != annotationPrefix+k || len(errs) != 1 || errs[0].reason != model.ReasonFailedClosed {
				t.Errorf("denied %+v, errors %+v; want denied by %s", a.denied, errs, k)
			}
		})
	}
	for _, cn := range []string{`CN=a\d`, "CN={1}", "(", "CN=a b"} {
		a, _ := parseAnnotations(map[string]string{annotationPrefix + "auth-tls-secret": "ca", annotationPrefix + "auth-tls-match-cn": cn})
		if a.denied == nil {
			t.Errorf("auth-tls-match-cn %q accepted", cn)
		}
	}
}
