package proxy

import (
	"strconv"
	"sync"
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
	b = start.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
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
	b = strconv.AppendFloat(b, took.Seconds(), 'f', 3, 64)
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
		b = strconv.AppendFloat(b, o.upstream.Seconds(), 'f', 3, 64)
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
