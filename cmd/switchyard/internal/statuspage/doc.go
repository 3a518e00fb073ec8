// Package statuspage serves the controller's live status page on the status
// port: servers and their paths, backends with their algorithm, endpoints with
// request rate, errors, EWMA score and in-flight count, the last syncs and
// reloads, and the errors found in Ingress objects.
//
// In: a Snapshot function the binary provides (built from the current
// model.Configuration and the balancer's view) and a History the binary
// records syncs and reloads into. Out: "/" (an HTML page with no external
// assets that refreshes itself) and "/status.json".
package statuspage
