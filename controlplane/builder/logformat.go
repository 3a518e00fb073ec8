package builder

import (
	"fmt"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// accessLogFormat reads log-format-upstream, log-format-escape-json and
// log-format-escape-none into the one parsed format both data planes
// write. A format that does not parse (an unknown variable, a '$' without
// a name) is reported naming the key and the variable, and the default
// format is kept; an escape key that is not a boolean keeps its default
// (false).
func accessLogFormat(data map[string]string, bad func(key, msg string)) model.LogFormat {
	var f model.LogFormat
	if v, ok := data["log-format-upstream"]; ok {
		// Kept as written: spaces are part of the format.
		segs, err := model.ParseLogFormat(v)
		if err != nil {
			bad("log-format-upstream", fmt.Sprintf("%q: %v", v, err))
		} else {
			f.Segments = segs
		}
	}
	json, none := keyFlag(data, "log-format-escape-json", bad), keyFlag(data, "log-format-escape-none", bad)
	switch {
	case none: // ingress-nginx's template: escape=none wins
		f.Escape = model.EscapeNone
	case json:
		f.Escape = model.EscapeJSON
	}
	return f
}
