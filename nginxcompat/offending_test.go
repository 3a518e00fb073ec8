package nginxcompat

import (
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestOffendingIngress: nginx -t's complaints about a certificate name the
// file, not a line; the Ingress is the one whose server uses that file.
func TestOffendingIngress(t *testing.T) {
	conf := []byte(`http {
    server {
        server_name "a.example";
        location / {
            set $namespace "ns";
            set $ingress_name "a";
        }
    }
    server {
        server_name "b.example";
        ssl_certificate "/certs/b.pem";
        ssl_certificate_key "/certs/b.pem";
        location / {
            set $namespace "ns";
            set $ingress_name "b";
        }
    }
}
`)
	b := model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "b"}
	for _, tc := range []struct {
		name, out string
		want      model.ObjectRef
	}{
		{"line named", `[emerg] unknown directive "x" in /etc/nginx.conf:6`, model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "a"}},
		{"cannot load certificate", `[emerg] cannot load certificate "/certs/b.pem": PEM_read_bio_X509_AUX() failed`, b},
		{"OpenSSL refuses the key", `[emerg] SSL_CTX_use_certificate("/certs/b.pem") failed (SSL: error:0A00018F:SSL routines::ee key too small)`, b},
		{"unknown file", `[emerg] cannot load certificate "/certs/zzz.pem"`, model.ObjectRef{}},
		{"nothing named", `[emerg] something else`, model.ObjectRef{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := offendingIngress(conf, tc.out); got != tc.want {
				t.Errorf("offendingIngress = %+v; want %+v", got, tc.want)
			}
		})
	}
}
