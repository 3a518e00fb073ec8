package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// logBufs are access-log line buffers, reused so a logged request
// allocates nothing.
var logBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// accessLog writes one line in the configured format (log-format-upstream,
// newLogFormat), by default ingress-nginx's upstreaminfo:
//
//	$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
//	"$http_referer" "$http_user_agent" $request_length $request_time
//	[$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr
//	$upstream_response_length $upstream_response_time $upstream_status $req_id
//
// Values not set are "-" as nginx prints them (nothing under escape=json
// or none). One Write per line.
func (p *Proxy) accessLog(f *logFormat, x *exchange, o *outcome, r *logReq, took time.Duration) {
	bp := logBufs.Get().(*[]byte)
	b := f.appendLog((*bp)[:0], x, o, r, took)
	b = append(b, '\n')
	_, _ = p.cfg.AccessLog.Write(b)
	*bp = b
	logBufs.Put(bp)
}

// logFormatOf is the access log format of the routing table in use.
func (p *Proxy) logFormatOf() *logFormat {
	if t := p.routes.Load(); t != nil && t.logFormat != nil {
		return t.logFormat
	}
	return defaultLogFormat
}

// logTime is $time_local of one second, formatted.
type logTime struct {
	sec  int64
	text []byte
}

// lastLogTime is the most recent second formatted: formatting a time costs
// more than the rest of the line, and a busy proxy logs many lines per
// second.
var lastLogTime atomic.Pointer[logTime]

// appendLogTime appends t as nginx's $time_local (02/Jan/2006:15:04:05
// -0700), formatting each second once.
func appendLogTime(b []byte, t time.Time) []byte {
	return append(b, logTimeText(&lastLogTime, t, "02/Jan/2006:15:04:05 -0700")...)
}

// appendMillis appends d in seconds with milliseconds, as nginx prints
// $request_time and $upstream_response_time (truncated to the
// millisecond).
func appendMillis(b []byte, d time.Duration) []byte {
	ms := max(d.Milliseconds(), 0)
	b = strconv.AppendInt(b, ms/1000, 10)
	b = append(b, '.')
	frac := ms % 1000
	b = append(b, byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return b
}
