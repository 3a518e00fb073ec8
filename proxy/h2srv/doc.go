// Package h2srv serves HTTP/2 connections (RFC 9113) to a net/http
// handler.
//
// In: an accepted connection whose client speaks HTTP/2 (after ALPN "h2",
// or a cleartext preface). Out: one call of the handler per request, on
// its own goroutine, with a *http.Request and an http.ResponseWriter as
// net/http's HTTP/2 server gives them.
//
// It exists for the cost of a request. golang.org/x/net/http2's server
// hands every frame a handler writes to the connection's goroutine
// through a channel and waits for it, and flushes on a new goroutine; on
// the proxy's path that is 77 µs of the 130 a request costs
// (docs/benchmarks/product.md). Here one goroutine per connection reads
// and applies frames, and a handler encodes its response's frames itself
// into the connection's write buffer under a lock: the first to find no
// write in progress writes everything queued, so answers finished
// together leave in one system call. Frames are parsed and written by
// x/net/http2's Framer and header blocks by its hpack package; but
// HEADERS and CONTINUATION frames are read by readHeaders into a block
// the connection reuses, where the Framer's ReadMetaHeaders allocates a
// frame and a field list per request. A request's stream, context,
// *http.Request, URL, header values and response writer are one
// allocation (stream), never reused.
package h2srv
