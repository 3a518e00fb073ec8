// Package statuspage serves the controller's live status page on the status
// port: servers and their paths, backends with their algorithm, endpoints with
// request rate, errors, EWMA score and in-flight count, the last syncs and
// reloads, and per object (mostly Ingress) its problems told apart by effect:
// fail closed (its routes answer 503), invalid, or ignored (an unsupported
// annotation), each with its message.
//
// The page fits 1280 and 800 px wide viewports without sideways scrolling
// (long names and messages wrap) and shows every time as ISO 8601 to the
// second with its zone, e.g. 2026-11-25T10:04:05Z (issue 21, item 7).
//
// In: a Snapshot function the binary provides (built from the current
// model.Configuration and the balancer's view) and a History the binary
// records syncs and reloads into. Out: "/" (an HTML page with no external
// assets that refreshes itself) and "/status.json".
//
// It imports nothing from this module: the binary converts the model into a
// Snapshot, so the page never depends on the control plane's types.
package statuspage
