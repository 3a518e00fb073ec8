package model

import "testing"

func TestValidUpstreamVhost(t *testing.T) {
	for s, want := range map[string]bool{
		"internal.example": true, "internal.example:8080": true, "a": true, "a-1.b2:65535": true,
		"": false, ":80": false, "host:": false, "host:0": false, "host:65536": false, "host:+80": false,
		"Upper.example": false, "-a.example": false, "a-.example": false, "a..example": false, "*.example": false,
		"a.example;": false, "a example": false, "_": false, "a.example:80:80": false,
	} {
		if got := ValidUpstreamVhost(s); got != want {
			t.Errorf("ValidUpstreamVhost(%q) = %v; want %v", s, got, want)
		}
	}
}

func TestHSTSHeader(t *testing.T) {
	for _, tc := range []struct {
		g    Global
		want string
	}{
		{Global{HSTSMaxAgeSeconds: 31536000, HSTSIncludeSubdomains: true}, "max-age=31536000; includeSubDomains"},
		{Global{HSTSPreload: true}, "max-age=0; preload"},
		{Global{HSTSMaxAgeSeconds: 4294967295, HSTSIncludeSubdomains: true, HSTSPreload: true}, "max-age=4294967295; includeSubDomains; preload"},
	} {
		if got := tc.g.HSTSHeader(); got != tc.want {
			t.Errorf("%+v: %q; want %q", tc.g, got, tc.want)
		}
	}
}

func TestValidCipherList(t *testing.T) {
	for s, want := range map[string]bool{"HIGH:!aNULL:!MD5": true, "ECDHE+AESGCM:@STRENGTH": true, "ALL\" ;": false, "A B": false, "": false} {
		if got := ValidCipherList(s); got != want {
			t.Errorf("ValidCipherList(%q) = %v; want %v", s, got, want)
		}
	}
}
