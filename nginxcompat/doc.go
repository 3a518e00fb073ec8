// Package nginxcompat is the nginx reload path and the ingress-nginx
// compatible /configuration API: it renders nginx.conf from a
// model.Configuration, tests it with `nginx -t`, reloads and supervises the
// nginx master, and serves /configuration/* so that ingress-nginx's controller
// (or ours) can push backends to the Go balancer.
//
// In: model.Configuration, /configuration request bodies. Out: nginx.conf on
// disk, signals to nginx, balancer.Registry syncs. Never imports client-go.
package nginxcompat
