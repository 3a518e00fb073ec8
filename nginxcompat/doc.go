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
// nginx dies with this process, and what a previous master left running is
// killed before a new one starts (orphans.go); Ready says whether the nginx
// that serves is ours and configured by us, and the backends are synced again
// every ReassertInterval to undo foreign POSTs (issue 20).
//
// In: model.Configuration, /configuration request bodies. Out: nginx.conf on
// disk, signals to nginx, balancer.Registry syncs. Never imports client-go.
package nginxcompat
