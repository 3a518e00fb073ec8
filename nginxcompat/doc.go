// Package nginxcompat is the nginx reload path and the ingress-nginx
// compatible /configuration API: it renders nginx.conf from a
// model.Configuration, tests it with `nginx -t`, reloads and supervises the
// nginx master, and serves /configuration/* so that ingress-nginx's controller
// (or ours) can push backends to the Go balancer.
//
// Render (render.go, templates/nginx.tmpl) is a pure function from the
// Configuration to nginx.conf bytes; Controller (process.go) is the sink that
// writes certificates, tests, installs, reloads and supervises nginx, behind
// the Tester/Reloader seam. Endpoint-only changes never reload nginx.
//
// In: model.Configuration, /configuration request bodies. Out: nginx.conf on
// disk, signals to nginx, balancer.Registry syncs. Never imports client-go.
package nginxcompat
