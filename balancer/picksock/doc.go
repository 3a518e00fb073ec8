// Package picksock is the Go side of the pick socket: the binary, versioned,
// length-prefixed frame protocol (docs/pick-protocol.md) that nginx's Lua shim
// speaks over one persistent, multiplexed unix-socket connection per worker.
//
// In: frames from the shim (pick requests carrying a backend name and the
// request variables that backend needs, completion feedback, needed-vars
// queries, and aggregated request metrics with their upstream connect
// times, handed to Config.Requests). Out: pick replies (ordered candidate peers, the backend actually
// used, Set-Cookie, EWMA score, error code) computed by a *balancer.Registry.
//
// The hot path (DecodeRequest, Server's per-frame handling, AppendPickReply)
// does not allocate. It imports package balancer and nothing else from this
// module.
package picksock
