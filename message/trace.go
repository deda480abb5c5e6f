package message

import "strings"

// Trace context headers (W3C Trace Context, https://www.w3.org/TR/trace-context/).
// Optional on every command; a participant echoes them on its reply.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// MaxTraceStateBytes bounds a tracestate header value we keep or echo
// (the W3C limit is 32 list members; 512 bytes is what it asks
// propagators to keep at least).
const MaxTraceStateBytes = 512

// ValidTraceParent reports whether v is a W3C traceparent of version 00:
// "00-" 32 lower-case hex digits (not all zero) "-" 16 (not all zero) "-"
// 2. A later version is accepted by its first four fields, as the
// specification asks.
func ValidTraceParent(v string) bool {
	if len(v) < 55 || (len(v) > 55 && (v[:2] == "00" || v[55] != '-')) {
		return false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' || v[:2] == "ff" {
		return false
	}
	hex := func(s string) bool {
		nonZero := false
		for i := 0; i < len(s); i++ {
			c := s[i]
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
			nonZero = nonZero || c != '0'
		}
		return nonZero
	}
	return hex(v[:2]+"1") && hex(v[3:35]) && hex(v[36:52]) && hex(v[53:55]+"1")
}

// TraceID is the trace id of a valid traceparent, or "".
func TraceID(traceparent string) string {
	if !ValidTraceParent(traceparent) {
		return ""
	}
	return traceparent[3:35]
}

// CleanTraceState returns v if it can be kept as a tracestate (printable
// ASCII, at most MaxTraceStateBytes), else "".
func CleanTraceState(v string) string {
	if len(v) > MaxTraceStateBytes {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return ""
		}
	}
	return strings.TrimSpace(v)
}

// EchoTrace copies a record's traceparent and tracestate into headers (the
// reply's), when the traceparent is valid; an invalid one is dropped, as a
// W3C participant would. It returns headers.
func EchoTrace(headers map[string]string, r Record) map[string]string {
	tp, _ := r.Header(HeaderTraceParent)
	if !ValidTraceParent(tp) {
		return headers
	}
	headers[HeaderTraceParent] = tp
	if ts, _ := r.Header(HeaderTraceState); CleanTraceState(ts) != "" {
		headers[HeaderTraceState] = CleanTraceState(ts)
	}
	return headers
}
