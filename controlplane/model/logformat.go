package model

import (
	"fmt"
	"strings"
)

// LogFormat is the access log's format (log-format-upstream), parsed once
// by the builder: both data planes use these segments, the nginx plane
// writing them back as a log_format, the Go plane appending them.
type LogFormat struct {
	// Segments are the format in order; nil means ingress-nginx's
	// upstreaminfo format (DefaultLogFormat).
	Segments []LogSegment `json:"segments,omitempty"`
	// Escape is how variable values are escaped: log-format-escape-none
	// wins over log-format-escape-json, as ingress-nginx writes them.
	Escape LogEscape `json:"escape,omitempty"`
}

// LogEscape is nginx's log_format escape= parameter.
type LogEscape string

// The escape modes. Only variable values are escaped, never the format's
// own text.
const (
	// EscapeDefault writes ", \ and bytes below 32 or above 126 as \xHH,
	// and a value that is not set as "-".
	EscapeDefault LogEscape = ""
	// EscapeJSON writes " and \ with a backslash, control bytes as \n,
	// \r, \t, \b, \f or \u00XX, others as they are; a value not set is
	// written as nothing.
	EscapeJSON LogEscape = "json"
	// EscapeNone writes values as they are; a value not set is nothing.
	EscapeNone LogEscape = "none"
)

// LogSegment is one piece of a LogFormat: Literal text, or (Var set) a
// variable's value.
type LogSegment struct {
	Literal string `json:"literal,omitempty"`
	Var     LogVar `json:"var,omitempty"`
	// Header is, for LogHTTP and LogSentHTTP, the field's name as the
	// variable writes it (lowercase, '_' for '-'): $http_x_request_id has
	// Header "x_request_id".
	Header string `json:"header,omitempty"`
}

// Name is the variable's nginx name, without the '$'.
func (s LogSegment) Name() string {
	switch s.Var {
	case LogHTTP:
		return "http_" + s.Header
	case LogSentHTTP:
		return "sent_http_" + s.Header
	}
	return s.Var.String()
}

// FieldName is the header field a LogHTTP or LogSentHTTP variable reads
// ("x-request-id" for $http_x_request_id), as nginx matches it: case
// aside, '_' in the variable stands for '-'.
func (s LogSegment) FieldName() string {
	return strings.ReplaceAll(s.Header, "_", "-")
}

// LogVar is a variable a log format may name: the closed set both data
// planes can produce (docs/migrating-from-ingress-nginx.md lists it).
type LogVar uint8

// The variables, with nginx's meaning (ngx_http_core_module's and
// ngx_http_upstream_module's embedded variables, and those ingress-nginx's
// locations set).
const (
	LogNone LogVar = iota
	LogRemoteAddr
	LogRemoteUser
	LogTimeLocal
	LogTimeISO8601
	LogMsec
	LogRequest
	LogStatus
	LogBodyBytesSent
	LogBytesSent
	LogRequestLength
	LogRequestTime
	LogProxyUpstreamName
	LogProxyAlternativeUpstreamName
	LogUpstreamAddr
	LogUpstreamResponseLength
	LogUpstreamResponseTime
	LogUpstreamConnectTime
	LogUpstreamHeaderTime
	LogUpstreamStatus
	LogReqID
	LogHost
	LogRequestMethod
	LogRequestURI
	LogURI
	LogDocumentURI
	LogArgs
	LogQueryString
	LogIsArgs
	LogScheme
	LogHTTPS
	LogServerProtocol
	LogServerName
	LogNamespace
	LogIngressName
	LogServiceName
	LogServicePort
	LogTheRealIP
	LogProxyAddXForwardedFor
	LogConnection
	LogConnectionRequests
	LogPid
	LogHostname
	LogHTTP     // $http_<name>: a request header field
	LogSentHTTP // $sent_http_<name>: a response header field
	logVarCount
)

var logVarNames = [logVarCount]string{
	LogRemoteAddr: "remote_addr", LogRemoteUser: "remote_user", LogTimeLocal: "time_local",
	LogTimeISO8601: "time_iso8601", LogMsec: "msec", LogRequest: "request", LogStatus: "status",
	LogBodyBytesSent: "body_bytes_sent", LogBytesSent: "bytes_sent", LogRequestLength: "request_length",
	LogRequestTime: "request_time", LogProxyUpstreamName: "proxy_upstream_name",
	LogProxyAlternativeUpstreamName: "proxy_alternative_upstream_name", LogUpstreamAddr: "upstream_addr",
	LogUpstreamResponseLength: "upstream_response_length", LogUpstreamResponseTime: "upstream_response_time",
	LogUpstreamConnectTime: "upstream_connect_time", LogUpstreamHeaderTime: "upstream_header_time",
	LogUpstreamStatus: "upstream_status", LogReqID: "req_id", LogHost: "host", LogRequestMethod: "request_method",
	LogRequestURI: "request_uri", LogURI: "uri", LogDocumentURI: "document_uri", LogArgs: "args",
	LogQueryString: "query_string", LogIsArgs: "is_args", LogScheme: "scheme", LogHTTPS: "https",
	LogServerProtocol: "server_protocol", LogServerName: "server_name", LogNamespace: "namespace",
	LogIngressName: "ingress_name", LogServiceName: "service_name", LogServicePort: "service_port",
	LogTheRealIP: "the_real_ip", LogProxyAddXForwardedFor: "proxy_add_x_forwarded_for",
	LogConnection: "connection", LogConnectionRequests: "connection_requests", LogPid: "pid",
	LogHostname: "hostname", LogHTTP: "http_", LogSentHTTP: "sent_http_",
}

// String is the variable's nginx name ("http_" and "sent_http_" for the
// header families).
func (v LogVar) String() string {
	if v < logVarCount {
		return logVarNames[v]
	}
	return ""
}

// MarshalText writes the variable's name.
func (v LogVar) MarshalText() ([]byte, error) {
	if v == LogNone || v >= logVarCount {
		return nil, fmt.Errorf("model: log variable %d is not known", v)
	}
	return []byte(v.String()), nil
}

// UnmarshalText reads a name MarshalText wrote.
func (v *LogVar) UnmarshalText(b []byte) error {
	for i := LogVar(1); i < logVarCount; i++ {
		if logVarNames[i] == string(b) {
			*v = i
			return nil
		}
	}
	return fmt.Errorf("model: %q is not a log variable", b)
}

// LogVarNames lists the variable names a format may use, sorted as
// declared, "http_" and "sent_http_" last (for the migration guide).
func LogVarNames() []string {
	out := make([]string, 0, logVarCount)
	for i := LogVar(1); i < logVarCount; i++ {
		n := logVarNames[i]
		if i == LogHTTP || i == LogSentHTTP {
			n += "<name>"
		}
		out = append(out, n)
	}
	return out
}

// DefaultLogFormatText is ingress-nginx's log-format-upstream default, the
// upstreaminfo format.
const DefaultLogFormatText = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr $upstream_response_length $upstream_response_time $upstream_status $req_id`

// DefaultLogFormat is DefaultLogFormatText parsed.
var DefaultLogFormat = func() []LogSegment {
	s, err := ParseLogFormat(DefaultLogFormatText)
	if err != nil {
		panic("BUG: the default log format does not parse: " + err.Error())
	}
	return s
}()

// maxLogFormat bounds a format's length.
const maxLogFormat = 4096

// ParseLogFormat reads a log-format-upstream value as nginx reads the
// format ingress-nginx writes in single quotes: first nginx's quoted-string
// escapes (\" \' \\ \t \r \n; any other backslash stays), then '$name' or
// '${name}' variables (names of letters, digits and '_', case-insensitive)
// among literal text. A variable outside the closed set (LogVar), a '$'
// without a name, a '${' without its '}', or a byte that is not printable
// ASCII, tab, CR or LF is an error naming it.
func ParseLogFormat(s string) ([]LogSegment, error) {
	if s == "" {
		return nil, fmt.Errorf("the format is empty")
	}
	if len(s) > maxLogFormat {
		return nil, fmt.Errorf("the format is longer than %d bytes", maxLogFormat)
	}
	u := unescapeNginxQuoted(s)
	var out []LogSegment
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			out = append(out, LogSegment{Literal: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(u); {
		c := u[i]
		if c != '$' {
			if !logLiteralByte(c) {
				return nil, fmt.Errorf("byte %#02x at %d is not printable ASCII, tab, CR or LF", c, i)
			}
			lit.WriteByte(c)
			i++
			continue
		}
		i++
		brace := i < len(u) && u[i] == '{'
		if brace {
			i++
		}
		start := i
		for i < len(u) && logNameByte(u[i]) {
			i++
		}
		name := strings.ToLower(u[start:i])
		if brace {
			if i >= len(u) || u[i] != '}' {
				return nil, fmt.Errorf("the closing brace of ${%s is missing", name)
			}
			i++
		}
		if name == "" {
			return nil, fmt.Errorf("'$' at %d starts no variable name", start-1)
		}
		seg, ok := logVarOf(name)
		if !ok {
			return nil, fmt.Errorf("unknown variable $%s (known: %s)", name, strings.Join(LogVarNames(), ", "))
		}
		flush()
		out = append(out, seg)
	}
	flush()
	return out, nil
}

// logVarOf finds the variable name (lowercase) names.
func logVarOf(name string) (LogSegment, bool) {
	for _, p := range []struct {
		prefix string
		v      LogVar
	}{{"sent_http_", LogSentHTTP}, {"http_", LogHTTP}} {
		if h, ok := strings.CutPrefix(name, p.prefix); ok && h != "" {
			return LogSegment{Var: p.v, Header: h}, true
		}
	}
	for i := LogVar(1); i < logVarCount; i++ {
		if i != LogHTTP && i != LogSentHTTP && logVarNames[i] == name {
			return LogSegment{Var: i}, true
		}
	}
	return LogSegment{}, false
}

func logNameByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// logLiteralByte: the bytes a format's text may hold.
func logLiteralByte(c byte) bool {
	return (c >= ' ' && c < 0x7f) || c == '\t' || c == '\n' || c == '\r'
}

// unescapeNginxQuoted undoes the escapes nginx's configuration reader
// takes out of a quoted string.
func unescapeNginxQuoted(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '"', '\'', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case 't':
				b.WriteByte('\t')
				i++
				continue
			case 'r':
				b.WriteByte('\r')
				i++
				continue
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// ValidLogFormatSegments reports whether segs can be written back as one
// nginx log format that means the same (every literal of bytes a format
// may hold, every variable known and named): the nginx plane checks again
// before writing it.
func ValidLogFormatSegments(segs []LogSegment) bool {
	if len(segs) == 0 {
		return false
	}
	for _, s := range segs {
		if s.Var == LogNone {
			if s.Literal == "" {
				return false
			}
			for i := 0; i < len(s.Literal); i++ {
				if !logLiteralByte(s.Literal[i]) || s.Literal[i] == '$' {
					return false
				}
			}
			continue
		}
		if s.Literal != "" || s.Var >= logVarCount {
			return false
		}
		if s.Var == LogHTTP || s.Var == LogSentHTTP {
			if s.Header == "" {
				return false
			}
			for i := 0; i < len(s.Header); i++ {
				c := s.Header[i]
				if !logNameByte(c) || (c >= 'A' && c <= 'Z') {
					return false
				}
			}
		} else if s.Header != "" {
			return false
		}
	}
	return true
}

// LogFormatText writes segs back as nginx format text: a variable as
// $name, or ${name} when text that could lengthen its name follows. The
// result holds no quote escapes: the caller quotes it for nginx.conf.
func LogFormatText(segs []LogSegment) string {
	var b strings.Builder
	for i, s := range segs {
		if s.Var == LogNone {
			b.WriteString(s.Literal)
			continue
		}
		if i+1 < len(segs) && segs[i+1].Var == LogNone && segs[i+1].Literal != "" && logNameByte(segs[i+1].Literal[0]) {
			b.WriteString("${" + s.Name() + "}")
			continue
		}
		b.WriteString("$" + s.Name())
	}
	return b.String()
}
