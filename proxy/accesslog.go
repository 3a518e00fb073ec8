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

// accessLog writes one line in ingress-nginx's default log format
// (log_format upstreaminfo):
//
//	$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
//	"$http_referer" "$http_user_agent" $request_length $request_time
//	[$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr
//	$upstream_response_length $upstream_response_time $upstream_status $req_id
//
// Empty values are "-" as nginx prints them. One Write per line.
func (p *Proxy) accessLog(x *exchange, o *outcome, start time.Time, took time.Duration) {
	bp := logBufs.Get().(*[]byte)
	b := (*bp)[:0]
	if x.remote.IsValid() {
		b = appendNginxAddr(b, x.remote)
	}
	b = append(b, " - - ["...)
	b = appendLogTime(b, start)
	b = append(b, "] \""...)
	b = append(b, x.method...)
	b = append(b, ' ')
	b = append(b, x.requestURI...)
	b = append(b, ' ')
	b = append(b, x.proto...)
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(x.status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(x.bodySent), 10)
	b = append(b, " \""...)
	b = dash(b, x.referer)
	b = append(b, "\" \""...)
	b = dash(b, x.userAgent)
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(x.reqLength), 10)
	b = append(b, ' ')
	b = appendMillis(b, took)
	b = append(b, " ["...)
	if o.loc != nil {
		b = append(b, o.loc.Backend...)
	}
	b = append(b, "] ["...)
	b = append(b, o.canary...)
	b = append(b, "] "...)
	if o.peer == "" {
		b = append(b, "- - - -"...)
	} else {
		b = append(b, o.peer...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(max(o.upstreamLength, 0)), 10)
		b = append(b, ' ')
		b = appendMillis(b, o.upstream)
		b = append(b, ' ')
		if o.upstreamStatus == 0 {
			b = append(b, '-')
		} else {
			b = strconv.AppendInt(b, int64(o.upstreamStatus), 10)
		}
	}
	b = append(b, ' ')
	b = dash(b, x.requestID)
	b = append(b, '\n')
	_, _ = p.cfg.AccessLog.Write(b)
	*bp = b
	logBufs.Put(bp)
}

// dash appends v, or "-" when it is empty.
func dash(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, '-')
	}
	return append(b, v...)
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
	sec := t.Unix()
	if c := lastLogTime.Load(); c != nil && c.sec == sec {
		return append(b, c.text...)
	}
	c := &logTime{sec: sec, text: t.AppendFormat(make([]byte, 0, 32), "02/Jan/2006:15:04:05 -0700")}
	lastLogTime.Store(c)
	return append(b, c.text...)
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
