package message

import (
	"fmt"
	"strings"
)

// Trace context headers (W3C Trace Context, https://www.w3.org/TR/trace-context/).
// Optional on every command; a participant echoes them on its reply.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Trace context bounds. A trace context that breaks one is dropped where
// it enters (a start, a reply, a command a participant echoes), never
// stored or sent on.
const (
	// TraceParentBytes is the length of a version 00 traceparent, the only
	// version kept: "00-" 32 hex "-" 16 hex "-" 2 hex.
	TraceParentBytes = 55
	// MaxTraceStateBytes bounds a tracestate kept or echoed (W3C asks
	// propagators to keep at least 512 bytes; longer ones are dropped here
	// rather than cut).
	MaxTraceStateBytes = 512
	// MaxTraceStateMembers is the W3C limit of list members in a tracestate.
	MaxTraceStateMembers = 32
)

// TraceDropCode says in a word why a trace context header was dropped.
type TraceDropCode string

// Codes of TraceDrop, short and fixed (a metric label).
const (
	TraceDropVersion  TraceDropCode = "version"   // traceparent version is not 00
	TraceDropLength   TraceDropCode = "length"    // traceparent is not 55 bytes
	TraceDropFormat   TraceDropCode = "format"    // not the grammar (upper case, not hex, bad key or value, not ASCII text)
	TraceDropZeroID   TraceDropCode = "zero_id"   // trace id or parent id all zeros
	TraceDropRepeated TraceDropCode = "repeated"  // header given more than once, or a tracestate key twice
	TraceDropSize     TraceDropCode = "size"      // tracestate longer than MaxTraceStateBytes
	TraceDropMembers  TraceDropCode = "members"   // tracestate with more than MaxTraceStateMembers members
	TraceDropNoParent TraceDropCode = "no_parent" // tracestate without a valid traceparent
)

// traceReasonExcerpt bounds the excerpt of a refused value in a reason.
const traceReasonExcerpt = 40

// TraceDrop says why one trace context header was dropped: Header is
// HeaderTraceParent or HeaderTraceState, Code one of the TraceDrop* codes,
// Reason a bounded text safe for a log line (the value is quoted, cut to
// a short excerpt).
type TraceDrop struct {
	Header string
	Code   TraceDropCode
	Reason string
}

func (d TraceDrop) String() string { return d.Header + " " + d.Reason }

// TraceParentProblem is why v is not a traceparent that is kept, "" when
// it is one: "00-" 32 lower-case hex digits (not all zero) "-" 16 (not all
// zero) "-" 2, exactly TraceParentBytes bytes. Any other version is
// refused: a later version's extra fields could be of any length and
// bytes, and the value goes on every command of the saga.
func TraceParentProblem(v string) (code TraceDropCode, reason string) {
	if len(v) >= 2 && v[:2] != "00" {
		return TraceDropVersion, fmt.Sprintf("has version %s (%d bytes); only version 00 is kept", quote(v[:2], 2), len(v))
	}
	if len(v) != TraceParentBytes {
		return TraceDropLength, fmt.Sprintf("is %d bytes, not the %d of a version 00 traceparent", len(v), TraceParentBytes)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch i {
		case 2, 35, 52:
			if c != '-' {
				return TraceDropFormat, fmt.Sprintf("has %s at byte %d where '-' belongs: %s", quote(v[i:i+1], 1), i, quote(v, traceReasonExcerpt))
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return TraceDropFormat, fmt.Sprintf("has %s at byte %d, not a lower-case hex digit: %s", quote(v[i:i+1], 1), i, quote(v, traceReasonExcerpt))
			}
		}
	}
	if allZero(v[3:35]) {
		return TraceDropZeroID, "has an all-zero trace id"
	}
	if allZero(v[36:52]) {
		return TraceDropZeroID, "has an all-zero parent id"
	}
	return "", ""
}

func allZero(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

// ValidTraceParent reports whether v is a traceparent that is kept (see
// TraceParentProblem).
func ValidTraceParent(v string) bool {
	code, _ := TraceParentProblem(v)
	return code == ""
}

// TraceID is the trace id of a valid traceparent, or "".
func TraceID(traceparent string) string {
	if !ValidTraceParent(traceparent) {
		return ""
	}
	return traceparent[3:35]
}

// TraceStateProblem checks a tracestate against the W3C grammar and this
// package's bounds and returns it normalised (list members without the
// optional white space around them and without empty members, joined by
// ","), or the code and reason it is refused with. An empty (or blank) v
// gives "" and no problem.
//
//	list        = member *( OWS "," OWS member ), at most 32 non-empty
//	member      = key "=" value
//	key         = lcalpha 0*255( lcalpha / DIGIT / "_" / "-" / "*" / "/" )
//	            / ( lcalpha / DIGIT ) 0*240( same ) "@" lcalpha 0*13( same )
//	value       = 0*255( %x20 / nblk-chr ) nblk-chr
//	nblk-chr    = %x21-2B / %x2D-3C / %x3E-7E
//
// A key appears at most once.
func TraceStateProblem(v string) (clean string, code TraceDropCode, reason string) {
	if v == "" {
		return "", "", ""
	}
	if len(v) > MaxTraceStateBytes {
		return "", TraceDropSize, fmt.Sprintf("is %d bytes, more than the %d kept", len(v), MaxTraceStateBytes)
	}
	var members []string
	seen := map[string]bool{}
	for _, m := range strings.Split(v, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		if len(members) == MaxTraceStateMembers {
			return "", TraceDropMembers, fmt.Sprintf("has more than %d list members", MaxTraceStateMembers)
		}
		key, value, ok := strings.Cut(m, "=")
		if !ok {
			return "", TraceDropFormat, fmt.Sprintf("has a list member without '=': %s", quote(m, traceReasonExcerpt))
		}
		if p := traceStateKeyProblem(key); p != "" {
			return "", TraceDropFormat, fmt.Sprintf("has key %s, which %s", quote(key, traceReasonExcerpt), p)
		}
		if p := traceStateValueProblem(value); p != "" {
			return "", TraceDropFormat, fmt.Sprintf("has for key %s a value that %s", quote(key, traceReasonExcerpt), p)
		}
		if seen[key] {
			return "", TraceDropRepeated, fmt.Sprintf("has key %s more than once", quote(key, traceReasonExcerpt))
		}
		seen[key] = true
		members = append(members, m)
	}
	return strings.Join(members, ","), "", ""
}

func keyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/'
}

func traceStateKeyProblem(k string) string {
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		switch {
		case k == "":
			return "is empty"
		case len(k) > 256:
			return fmt.Sprintf("is %d bytes, more than 256", len(k))
		case k[0] < 'a' || k[0] > 'z':
			return "does not start with a lower-case letter"
		}
		for i := 1; i < len(k); i++ {
			if !keyChar(k[i]) {
				return fmt.Sprintf("has %s at byte %d (lower-case letters, digits, '_', '-', '*' and '/' only)", quote(k[i:i+1], 1), i)
			}
		}
		return ""
	}
	switch {
	case tenant == "" || len(tenant) > 241:
		return "has a tenant id of 0 or more than 241 bytes"
	case system == "" || len(system) > 14:
		return "has a system id of 0 or more than 14 bytes"
	case !(tenant[0] >= 'a' && tenant[0] <= 'z' || tenant[0] >= '0' && tenant[0] <= '9'):
		return "has a tenant id that starts with neither a lower-case letter nor a digit"
	case system[0] < 'a' || system[0] > 'z':
		return "has a system id that does not start with a lower-case letter"
	}
	for _, part := range []string{tenant, system} {
		for i := 1; i < len(part); i++ {
			if !keyChar(part[i]) {
				return fmt.Sprintf("has %s (lower-case letters, digits, '_', '-', '*' and '/' only, one '@')", quote(part[i:i+1], 1))
			}
		}
	}
	return ""
}

func traceStateValueProblem(v string) string {
	switch {
	case v == "":
		return "is empty"
	case len(v) > 256:
		return fmt.Sprintf("is %d bytes, more than 256", len(v))
	case v[len(v)-1] == ' ':
		return "ends with a space"
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return fmt.Sprintf("has %s at byte %d (printable ASCII but ',' and '=' only)", quote(v[i:i+1], 1), i)
		}
	}
	return ""
}

// CleanTraceState is v normalised if it is a tracestate that is kept (see
// TraceStateProblem), else "".
func CleanTraceState(v string) string {
	clean, _, _ := TraceStateProblem(v)
	return clean
}

// CheckTraceContext is the door every trace context passes where it enters:
// it returns the traceparent and tracestate to keep ("" for none) and what
// was dropped and why. An invalid traceparent drops the tracestate with it
// (a tracestate means nothing without its traceparent); an invalid
// tracestate is dropped alone. Empty values are absent, not dropped.
func CheckTraceContext(traceparent, tracestate string) (tp, ts string, drops []TraceDrop) {
	if traceparent == "" {
		if strings.Trim(tracestate, " \t,") != "" {
			drops = append(drops, TraceDrop{HeaderTraceState, TraceDropNoParent, "came without a traceparent"})
		}
		return "", "", drops
	}
	if code, reason := TraceParentProblem(traceparent); code != "" {
		drops = append(drops, TraceDrop{HeaderTraceParent, code, reason})
		if strings.Trim(tracestate, " \t,") != "" {
			drops = append(drops, TraceDrop{HeaderTraceState, TraceDropNoParent, "came with an invalid traceparent"})
		}
		return "", "", drops
	}
	ts, code, reason := TraceStateProblem(tracestate)
	if code != "" {
		drops = append(drops, TraceDrop{HeaderTraceState, code, reason})
	}
	return traceparent, ts, drops
}

// RecordTraceContext checks the trace context headers of record r (see
// CheckTraceContext); a header given more than once is dropped.
func RecordTraceContext(r Record) (tp, ts string, drops []TraceDrop) {
	var tps, tss []string
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderTraceParent:
			tps = append(tps, string(h.Value))
		case HeaderTraceState:
			tss = append(tss, string(h.Value))
		}
	}
	if len(tps) > 1 {
		return "", "", []TraceDrop{{HeaderTraceParent, TraceDropRepeated, fmt.Sprintf("appears %d times", len(tps))}}
	}
	if len(tps) == 0 {
		tps = []string{""}
	}
	// Several tracestate headers make one list (W3C), as HTTP combines them.
	return CheckTraceContext(tps[0], strings.Join(tss, ","))
}

// EchoTrace copies a record's traceparent and tracestate into headers (the
// reply's) when they pass CheckTraceContext; what does not is dropped, as
// a W3C participant would. It returns headers.
func EchoTrace(headers map[string]string, r Record) map[string]string {
	tp, ts, _ := RecordTraceContext(r)
	if tp == "" {
		return headers
	}
	headers[HeaderTraceParent] = tp
	if ts != "" {
		headers[HeaderTraceState] = ts
	}
	return headers
}
